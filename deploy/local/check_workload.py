#!/usr/bin/env python3
"""Checks what workload.py wrote, from the files alone (python3, stdlib only):

    python3 deploy/local/check_workload.py --out .apiary/demo/hive

* every line parses, with Hive's key order and timestamp format; no partial last line;
* per session log: seq strictly increases over the non-delta lines (one bus per queen session);
* worker lines: stream_id = "worker:<execution_id>", colony_id = the queen session (the directory);
* every durable event of the debug log is in a session log with the same identity;
* sensitive markers (zzcanary..., paths, emails, keys) sit only below sensitive data keys;
* cached + cache_creation <= input tokens; tool calls pair up by tool_use_id;
* usage recomputed from the logs (durable events, deduplicated by (session, stream, seq, type, timestamp)
  the way Apiary identifies Hive events) equals expected.json by user, model, colony and session;
* the status story holds: the stalled worker ends on node_stalled, the waiting queen on client_input_requested,
  the escalating worker on escalation_requested, the crashed agent run on a tool call started, with a state.json
  beside its log; failed/completed sessions end the way their status says;
* tasks by state, the call in flight and per-tool calls, errors and durations (paired by tool_use_id, floored to
  ms; Claude Code's own duration_ms) recomputed from the files equal expected.json's;
* Claude Code's OTLP exports (OUT/claude_code/<user>/): OTLP/JSON as Claude Code sends it, event.sequence
  increasing per session, markers only in attributes the agent drops (prompt, tool_parameters, tool_input,
  error, user.*, organization.id, resource attributes but service.name); their usage, recomputed from the
  raw attributes (input = input_tokens + cache_read_tokens + cache_creation_tokens, records deduplicated
  by request_id / tool_use_id / session.id + event.sequence as Apiary identifies them), is part of the
  totals above; quiet sessions ended at least stall_after before the end of the day, the active one not.
Exit 0 when all hold; 1 with a list of failures otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections import defaultdict
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload as w  # noqa: E402  (constants only; w.claude_code: DROPPED_ATTRIBUTES)

KEYS = ["type", "stream_id", "node_id", "execution_id", "data", "timestamp", "correlation_id", "colony_id", "seq"]
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?$")
FAIL: list[str] = []


def check(cond, msg):
    if not cond:
        FAIL.append(msg)


def walk(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from walk(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from walk(v, path + (i,))
    elif isinstance(obj, str):
        yield path, obj


def parse(path: Path) -> list[dict]:
    raw = path.read_bytes()
    check(raw.endswith(b"\n"), f"{path}: ends in a partial line")
    out = []
    for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            FAIL.append(f"{path}:{n}: not JSON ({e})")
            continue
        keys = list(d)
        check(keys[:9] == KEYS and set(keys[9:]) <= {"run_id"}, f"{path}:{n}: keys {keys}")
        check(TS_RE.match(d.get("timestamp", "")) is not None, f"{path}:{n}: timestamp {d.get('timestamp')}")
        check(isinstance(d.get("seq"), int) and d["seq"] >= 1, f"{path}:{n}: seq")
        for p, s in walk(d):
            if any(pat in s for pat in w.LEAK_PATTERNS):
                # skill_installed: a path in a non-content field, as Hive writes it (an allowlist drops it anyway)
                check(len(p) >= 2 and p[0] == "data" and any(k in w.SENSITIVE_KEYS | {"skill_installed"}
                                                              for k in p[1:] if isinstance(k, str)),
                      f"{path}:{n}: sensitive text outside a sensitive key at {'.'.join(map(str, p))}")
        out.append(d)
    return out


def usage_add(m, d):
    data = d["data"]
    if d["type"] == "llm_turn_complete":
        for k in ("input_tokens", "output_tokens", "cached_tokens", "cache_creation_tokens"):
            m[k] += data[k]
        check(data["cached_tokens"] + data["cache_creation_tokens"] <= data["input_tokens"],
              f"cached + cache_creation > input in {d['execution_id']} seq {d['seq']}")
        cost = Decimal(repr(float(data["cost_usd"])))
        m["cost_nanos"] += int(cost * Decimal(1_000_000_000))
        m["llm_calls"] += 1
        m["unpriced_turns"] += int(cost == 0 and data["input_tokens"] + data["output_tokens"] > 0)
    elif d["type"] == "tool_call_completed":
        m["tool_calls"] += 1
        m["tool_errors"] += int(bool(data["is_error"]))


def otlp_value(v: dict):
    """An OTLP/JSON AnyValue as Python: strings stay strings, intValue (a string) becomes int."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    FAIL.append(f"unexpected OTLP value {v}")
    return None


def claude_code_events(out: Path, exp: dict, patterns: list[str]) -> list[tuple[str, str, dict, int]]:
    """The durable Claude Code records of every export, deduplicated: (user, event name, attributes, time ms)."""
    seen: dict[tuple, tuple] = {}
    last_seq: dict[str, int] = {}
    for user, names in exp.get("claude_code", {}).get("exports", {}).items():
        for name in names:
            path = out / "claude_code" / user / name
            raw = path.read_bytes()
            body = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
            for rl in body["resourceLogs"]:
                resource = {kv["key"]: otlp_value(kv["value"]) for kv in rl["resource"]["attributes"]}
                check(resource.get("service.name") == "claude-code", f"{path}: service.name {resource.get('service.name')}")
                for k, v in resource.items():
                    if isinstance(v, str) and any(pat in v for pat in patterns):
                        check(k != "service.name", f"{path}: marker in service.name, which the agent keeps")
                for sl in rl["scopeLogs"]:
                    for r in sl["logRecords"]:
                        a = {kv["key"]: otlp_value(kv["value"]) for kv in r["attributes"]}
                        ev = r["body"]["stringValue"]
                        check(ev == f"claude_code.{a.get('event.name')}", f"{path}: body {ev} vs event.name")
                        ms = int(r["timeUnixNano"]) // 1_000_000
                        iso = datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
                        check(a.get("event.timestamp") == iso, f"{path}: event.timestamp {a.get('event.timestamp')} "
                                                               f"!= timeUnixNano {iso}")
                        sid, seq = a["session.id"], int(a["event.sequence"])
                        for k, v in a.items():
                            if isinstance(v, str) and any(pat in v for pat in patterns):
                                check(k in w.claude_code.DROPPED_ATTRIBUTES,
                                      f"{path}: marker in {k} of {ev}, an attribute the agent is not known to drop")
                        short = ev.split(".", 1)[1]
                        if short not in ("api_request", "tool_result", "api_error"):
                            continue
                        own = a.get("tool_use_id") if short == "tool_result" else a.get("request_id")
                        ident = (short, own) if own else (short, sid, seq)
                        if ident in seen:
                            continue
                        check(seq > last_seq.get(sid, 0), f"{path}: event.sequence {seq} of {sid} does not increase")
                        last_seq[sid] = seq
                        seen[ident] = (user, short, a, ms)
    return list(seen.values())


def claude_code_add(m: dict, short: str, a: dict):
    if short == "api_request":
        cr, cw = int(a["cache_read_tokens"]), int(a["cache_creation_tokens"])
        m["input_tokens"] += int(a["input_tokens"]) + cr + cw
        m["output_tokens"] += int(a["output_tokens"])
        m["cached_tokens"] += cr
        m["cache_creation_tokens"] += cw
        cost = Decimal(repr(float(a["cost_usd"])))
        m["cost_nanos"] += int((cost * Decimal(1_000_000_000)).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        m["llm_calls"] += 1
    elif short == "tool_result":
        m["tool_calls"] += 1
        m["tool_errors"] += int(a["success"] == "false")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="check workload.py output")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    exp = json.loads((args.out / "expected.json").read_text())
    users = sorted(exp["files"])
    events: dict[tuple, tuple[str, dict]] = {}  # identity -> (user, line)
    debug_events: list[tuple[str, tuple, dict]] = []
    last_durable: dict[str, dict] = {}
    for user in users:
        home = args.out / user
        for rel in exp["files"][user]:
            path = home / rel
            check(path.is_file(), f"{path}: missing")
            if not path.is_file():
                continue
            lines = parse(path)
            parts = Path(rel).parts
            hint = parts[-2] if len(parts) >= 3 and parts[-3] == "sessions" else None
            prev_seq = 0
            for d in lines:
                sess = d["execution_id"] or d["data"].get("session_id") or hint
                if hint is not None and d["type"] not in w.DELTA_TYPES:
                    check(d["seq"] > prev_seq, f"{path}: seq {d['seq']} after {prev_seq}")
                    prev_seq = d["seq"]
                if hint is not None and d["execution_id"] and (d["stream_id"] or "").startswith("worker:"):
                    check(d["stream_id"] == f"worker:{d['execution_id']}", f"{path}: worker stream {d['stream_id']}")
                    check(d["colony_id"] == hint, f"{path}: worker colony_id {d['colony_id']} != {hint}")
                if d["type"] not in w.DURABLE_TYPES or sess is None:
                    continue
                ident = (sess, d["stream_id"], d["seq"], d["type"], d["timestamp"])
                if hint is None:
                    debug_events.append((user, ident, d))
                    continue
                check(ident not in events, f"{path}: duplicate identity {ident}")
                events[ident] = (user, d)
                last_durable[sess] = d
    for user, ident, d in debug_events:
        check(ident in events, f"debug log of {user}: {ident} is in no session log")
        if ident in events:
            check(events[ident][1]["data"] == d["data"], f"debug log of {user}: {ident} data differs")

    keys = w.USAGE_KEYS
    by_user, by_model, by_colony, by_session = (defaultdict(lambda: dict.fromkeys(keys, 0)) for _ in range(4))
    started: dict[str, int] = defaultdict(int)
    for (sess, *_), (user, d) in events.items():
        for m in (by_user[user], by_session[sess]):
            usage_add(m, d)
        if d["type"] == "llm_turn_complete":
            usage_add(by_model[d["data"]["model"]], d)
        if d["type"] in ("llm_turn_complete", "tool_call_completed"):
            usage_add(by_colony[d["colony_id"] or ""], d)
        if d["type"] == "tool_call_started":
            started[d["data"]["tool_use_id"]] += 1
        if d["type"] == "tool_call_completed":
            started[d["data"]["tool_use_id"]] -= 1

    for sid, meta in exp["sessions"].items():
        if meta.get("runtime", "hive") != "hive":
            continue
        last = last_durable.get(sid)
        check(last is not None, f"session {sid}: no durable event")
        if last is None:
            continue
        want_last = {"stalled": {"node_stalled"}, "waiting": {"client_input_requested"},
                     "failed": {"subagent_report", "execution_failed"},
                     "completed": {"execution_completed", "subagent_report"},
                     "active": {"llm_turn_complete", "tool_call_completed"},
                     "degraded": {"llm_turn_complete", "tool_call_completed"},
                     "needs_attention": {"escalation_requested"},
                     "crashed": {"tool_call_started"}}[meta["status"]]
        check(last["type"] in want_last, f"session {sid} ({meta['status']}): last durable event is {last['type']}")
        if meta["status"] == "crashed":
            states = list((args.out / meta["user"]).glob(f"agents/*/sessions/{sid}/state.json"))
            check(len(states) == 1, f"session {sid} (crashed): state.json files {states}")
            for p in states:
                st = json.loads(p.read_text())
                check(st.get("session_id") == sid and isinstance(st.get("pid"), int) and (
                    st.get("status") == "active" or st.get("error") == "Stale session: runtime restarted"),
                    f"{p}: not a running or stale-marked execution: {st.get('status')} {st.get('pid')}")
    # Claude Code, from its exports alone
    end_ms = round(datetime.fromisoformat(exp["window"]["end_local"]).timestamp() * 1000)
    cc_last: dict[str, tuple[str, int]] = {}
    cc = claude_code_events(args.out, exp, exp["privacy"]["leak_patterns"])
    for user, short, a, ms in cc:
        sid = a["session.id"]
        for m in (by_user[user], by_session[sid], by_colony[""]):
            claude_code_add(m, short, a)
        if short == "api_request":
            claude_code_add(by_model[a["model"]], short, a)
        if ms >= cc_last.get(sid, ("", 0))[1]:
            cc_last[sid] = (short, ms)
    for sid in exp.get("claude_code", {}).get("sessions", []):
        meta = exp["sessions"][sid]
        check(meta["runtime"] == "claude_code" and meta["colony"] is None and meta["parent"] is None,
              f"Claude Code session {sid}: {meta}")
        last = cc_last.get(sid)
        check(last is not None, f"Claude Code session {sid}: no durable record")
        if last is None:
            continue
        quiet_s = (end_ms - last[1]) / 1000
        if meta["status"] == "active":
            check(last[0] in ("api_request", "tool_result") and quiet_s < 60,
                  f"Claude Code session {sid} (active): last record {last[0]} {quiet_s:.0f}s before the end")
        else:
            # quiet for longer than stall_after: an interactive session waits for its user (quiet_interactive)
            check(meta["status"] == "idle" and quiet_s > 300,
                  f"Claude Code session {sid} ({meta['status']}): last record {quiet_s:.0f}s before the end")

    def same(name, got, want):
        for k in keys:
            check(got.get(k, 0) == want.get(k, 0), f"{name}: {k} recomputed {got.get(k, 0)} != expected {want.get(k, 0)}")

    for u in users:
        same(f"user {u}", by_user[u], exp["by_user"][u])
    check(set(by_model) == set(exp["by_model"]), f"models {sorted(by_model)} != {sorted(exp['by_model'])}")
    for m, v in exp["by_model"].items():
        same(f"model {m}", by_model[m], v)
    check(set(by_colony) == set(exp["by_colony"]), f"colonies {sorted(by_colony)} != {sorted(exp['by_colony'])}")
    for c, v in exp["by_colony"].items():
        same(f"colony {c or '(none)'}", by_colony[c], v)
    for sid, meta in exp["sessions"].items():
        same(f"session {sid}", by_session[sid], meta["usage"])
    open_calls = [k for k, v in started.items() if v != 0]
    # the waiting queen's ask_user and the crashed run's last command are still open
    check(len(open_calls) <= 2, f"unpaired tool calls: {open_calls}")

    # work: tasks, the call in flight, per-tool durations
    tasks: dict = defaultdict(dict)
    calls: dict = defaultdict(dict)
    ended: dict = {}
    tools: dict = defaultdict(lambda: dict.fromkeys(("tool_calls", "tool_errors", "tool_calls_timed",
                                                     "tool_duration_ms"), 0))
    for (sess, *_), (user, d) in sorted(events.items(), key=lambda kv: kv[1][1]["timestamp"]):
        data, at = d["data"], datetime.fromisoformat(d["timestamp"])
        if d["type"] in ("task_created", "task_updated"):
            task = data.get("task") or {}
            tasks[sess][str(task.get("id", data.get("task_id")))] = task.get("status")
        elif d["type"] == "tool_call_started":
            calls[sess][data["tool_use_id"]] = [data["tool_name"], at, None]
        elif d["type"] == "tool_call_completed":
            c = calls[sess].setdefault(data["tool_use_id"], [data["tool_name"], None, None])
            c[2] = at
            t = tools[data["tool_name"]]
            t["tool_calls"] += 1
            t["tool_errors"] += 1 if data.get("is_error") else 0
            if c[1] is not None:
                t["tool_calls_timed"] += 1
                t["tool_duration_ms"] += int((at - c[1]).total_seconds() * 1_000_000) // 1000
        elif d["type"] in ("execution_completed", "execution_failed"):
            ended[sess] = at
    for user, short, a, ms in cc:
        if short == "tool_result":
            t = tools[a["tool_name"]]
            t["tool_calls"] += 1
            t["tool_errors"] += 0 if str(a.get("success")).lower() == "true" else 1
            t["tool_calls_timed"] += 1
            t["tool_duration_ms"] += int(a["duration_ms"])
    check(dict(tools) == exp["by_tool"], f"by tool recomputed {dict(tools)} != expected {exp['by_tool']}")
    for sid, meta in exp["sessions"].items():
        counts = {"pending": 0, "in_progress": 0, "completed": 0, "other": 0}
        for state in tasks[sid].values():
            counts[state if state in counts and state != "other" else "other"] += 1
        check(counts == meta["tasks"], f"session {sid}: tasks recomputed {counts} != expected {meta['tasks']}")
        flying = [(c[1], c[0]) for c in calls[sid].values()
                  if c[2] is None and c[1] is not None and (sid not in ended or c[1] > ended[sid])]
        act = {"tool_name": max(flying)[1], "in_flight": len(flying)} if flying else None
        check(act == meta["activity"], f"session {sid}: activity recomputed {act} != expected {meta['activity']}")
    n_files = sum(len(v) for v in exp["files"].values())
    if FAIL:
        for f in FAIL[:50]:
            print(f"FAIL {f}")
        print(f"{len(FAIL)} failure(s)")
        return 1
    print(f"ok: {n_files} files, {len(events)} durable events ({len(debug_events)} also in the debug log), "
          f"{len(cc)} durable Claude Code records in {sum(len(v) for v in exp['claude_code']['exports'].values())} "
          f"OTLP exports, {len(exp['sessions'])} sessions; totals, statuses and privacy markers as expected.json "
          f"says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
