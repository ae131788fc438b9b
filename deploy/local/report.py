#!/usr/bin/env python3
"""What a product dashboard shows, read from the ingest's query API (python3, stdlib only).

    python3 deploy/local/report.py --url http://127.0.0.1:8080 --token-file .apiary/demo/read.token \
                                   [--expected .apiary/demo/hive/expected.json] [--from ... --to ... --tz ...]

Prints usage by user, by model, by colony and by runtime (Hive, Claude Code; tokens in / cached / cache
writes / out, cost, unpriced turns, LLM calls, tool calls, tool errors, events), tool calls by tool (calls,
errors, time: total, p50, p95), every session's status (runtime, phase, health, last event, tasks, what it is
doing now, active and wall-clock time), device liveness (last heartbeat, backlog, agent version), and, with
--expected, one line comparing the dashboard with the totals the workload generator computed itself.

Uses only the read API: GET /v1/usage (group_by user, model, colony, runtime, tool, session+user),
GET /v1/sessions/{id}, GET /v1/devices, with a `read`-scope bearer token. (An ingest without
group_by=runtime: usage by runtime is then the session rows added up by each session's runtime.)
Exit status: 0 printed (and matches --expected when given), 1 mismatch, 2 the API could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

USAGE_KEYS = ["input_tokens", "output_tokens", "cached_tokens", "cache_creation_tokens", "cost_nanos",
              "llm_calls", "unpriced_turns", "tool_calls", "tool_errors"]
COLUMNS = [("llm calls", "llm_calls"), ("input tok", "input_tokens"), ("cached", "cached_tokens"),
           ("cache write", "cache_creation_tokens"), ("output tok", "output_tokens"), ("cost USD", "cost"),
           ("reported USD", "cost_reported"), ("estimated", "estimated_turns"), ("unpriced", "unpriced_turns"),
           ("tool calls", "tool_calls"), ("tool err", "tool_errors"), ("events", "events")]
# An ingest with a price catalog also says where each cost comes from (reported by the producer, or estimated
# from the catalog); these are summed like the others where rows are added up.
PROVENANCE_KEYS = ["cost_reported_nanos", "cost_estimated_nanos", "estimated_turns"]


class ApiFailure(Exception):
    pass


class Api:
    def __init__(self, base: str, token: str, timeout: float = 15.0):
        self.base, self.token, self.timeout = base.rstrip("/"), token, timeout

    def get(self, path: str, **params):
        q = {k: v for k, v in params.items() if v is not None}
        url = self.base + path + ("?" + urllib.parse.urlencode(q) if q else "")
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}",
                                                   "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", "replace")
            try:
                err = json.loads(body)["error"]
                detail = f"{err.get('code')}: {err.get('message')}"
            except (ValueError, KeyError, TypeError):
                detail = body[:300]
            raise ApiFailure(f"GET {path} -> HTTP {e.code} ({detail})") from None
        except (urllib.error.URLError, OSError) as e:
            raise ApiFailure(f"GET {url} failed: {e}") from None


# ---------------------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------------------
def num(v) -> str:
    return "-" if v is None else f"{v:,}"


def cost_str(row: dict, key: str = "cost_nanos") -> str:
    if key != "cost_nanos" and key not in row:
        return "-"
    nanos = row.get(key)
    if nanos is None:
        usd = row.get("cost_usd") or 0.0
    else:
        usd = nanos / 1e9
    return f"{usd:,.4f}"


def table(headers: list[str], rows: list[list[str]], right: set[int] | None = None, indent="  ") -> str:
    right = right or set()
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    def fmt(r):
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        return (indent + "  ".join(cells)).rstrip()
    out = [fmt(headers), indent + "  ".join("-" * w for w in widths)]
    out += [fmt(r) for r in rows]
    return "\n".join(out)


def usage_cells(row: dict) -> list[str]:
    cells = []
    for _, key in COLUMNS:
        if key == "cost":
            cells.append(cost_str(row))
        elif key == "cost_reported":
            cells.append(cost_str(row, "cost_reported_nanos"))
        else:
            cells.append(num(row.get(key, 0)) if key in row or key != "estimated_turns" else "-")
    return cells


def when(ts: str | None, now: datetime) -> str:
    if not ts:
        return "-"
    try:
        t = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return ts
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    age = (now - t).total_seconds()
    local = t.astimezone()
    if age < 0:
        ago = "in the future"
    elif age < 90:
        ago = f"{age:.0f}s ago"
    elif age < 5400:
        ago = f"{age / 60:.0f} min ago"
    else:
        ago = f"{age / 3600:.1f} h ago"
    return f"{local.strftime('%H:%M:%S')} ({ago})"


def secs(ms) -> str:
    """A duration in milliseconds, readable: 850ms, 12.3s, 4m05s, 2h10m."""
    if ms is None:
        return "-"
    ms = int(ms)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def tasks_str(t: dict | None) -> str:
    """Task counts: '1/3 done, 2 pending'."""
    if not t or not any(t.values()):
        return "-"
    total = sum(t.values())
    rest = [f"{t[k]} {k.replace('_', ' ')}" for k in ("in_progress", "pending", "other") if t.get(k)]
    return f"{t.get('completed', 0)}/{total} done" + (", " + ", ".join(rest) if rest else "")


def doing_str(a: dict | None, now: datetime) -> str:
    """The operation in flight: 'ask_user for 4m' (+N more in parallel)."""
    if not a:
        return "-"
    since = when(a.get("since"), now)
    more = f" (+{a['in_flight'] - 1})" if (a.get("in_flight") or 1) > 1 else ""
    return f"{a.get('tool_name') or a.get('kind')} since {since}{more}"


def short(sid: str | None, keep=6) -> str:
    """session_20261122_011819_70890a33 -> ..._011819_70890a33 (date dropped; still unique in a day)."""
    if not sid:
        return "-"
    parts = sid.split("_")
    if len(parts) == 4 and parts[0] == "session":
        return f"{parts[2]}_{parts[3]}"
    return sid if len(sid) <= 24 else sid[:10] + "…" + sid[-keep:]


# ---------------------------------------------------------------------------------------------------------
# Comparison with expected.json
# ---------------------------------------------------------------------------------------------------------
def as_reported(row: dict) -> dict:
    """The row as the workload counts it: the workload knows the costs its producers reported, and calls a turn
    unpriced when it has none. An ingest with a price catalog prices those turns (cost_nanos = reported, else
    estimated): its reported costs are cost_reported_nanos, and the workload's unpriced turns are its estimated
    plus its unpriced ones."""
    if "cost_reported_nanos" not in row:
        return row
    out = dict(row)
    out["cost_nanos"] = row["cost_reported_nanos"]
    out["unpriced_turns"] = row.get("unpriced_turns", 0) + row.get("estimated_turns", 0)
    return out


def compare(name: str, got: dict | None, want: dict, problems: list[str]) -> bool:
    if got is None:
        problems.append(f"{name}: missing from the dashboard")
        return False
    got = as_reported(got)
    bad = [f"{k} {got.get(k, 0)} != {want.get(k, 0)}" for k in USAGE_KEYS if got.get(k, 0) != want.get(k, 0)]
    if bad:
        problems.append(f"{name}: " + ", ".join(bad))
        return False
    return True


TOOL_KEYS = ["tool_calls", "tool_errors", "tool_calls_timed", "tool_duration_ms"]


def check_expected(exp: dict, by_user: dict, by_model: dict, by_colony: dict, by_runtime: dict, totals: dict,
                   sessions: dict, by_tool: dict | None = None) -> tuple[str, list[str], list[str]]:
    problems: list[str] = []
    notes: list[str] = []
    parts = []
    ok = sum(compare(f"user {u}", by_user.get(u), w, problems) for u, w in exp["by_user"].items())
    extra = sorted(set(by_user) - set(exp["by_user"]) - {None})
    for u in extra:
        if any(by_user[u].get(k) for k in USAGE_KEYS):
            problems.append(f"user {u}: on the dashboard but not in the workload")
    parts.append(f"by user {ok}/{len(exp['by_user'])}")
    ok = sum(compare(f"model {m}", by_model.get(m), w, problems) for m, w in exp["by_model"].items())
    parts.append(f"by model {ok}/{len(exp['by_model'])}")
    ok = 0
    for c, w in exp["by_colony"].items():
        ok += compare(f"colony {c or '(none)'}", by_colony.get(c or None), w, problems)
    parts.append(f"by colony {ok}/{len(exp['by_colony'])}")
    if "by_runtime" in exp:
        ok = sum(compare(f"runtime {r}", by_runtime.get(r), w, problems) for r, w in exp["by_runtime"].items())
        parts.append(f"by runtime {ok}/{len(exp['by_runtime'])}")
    if "by_tool" in exp and by_tool is not None:
        ok = 0
        for name, want in exp["by_tool"].items():
            got = by_tool.get(name) or {}
            diff = [f"{k} {got.get(k)} != {want[k]}" for k in TOOL_KEYS if got.get(k) != want[k]]
            if diff:
                problems.append(f"tool {name}: " + ", ".join(diff))
            else:
                ok += 1
        for name in sorted(set(by_tool) - set(exp["by_tool"])):
            problems.append(f"tool {name}: on the dashboard but not in the workload")
        parts.append(f"by tool {ok}/{len(exp['by_tool'])}")
    tot_ok = compare("totals", totals, exp["totals"], problems)
    parts.append("totals " + ("ok" if tot_ok else "DIFFER"))
    ok = work_ok = act_ok = 0
    for sid, meta in exp["sessions"].items():
        s = sessions.get(sid)
        want = meta["status"]
        if s is None:
            problems.append(f"session {sid} ({meta['label']}): not on the dashboard")
            continue
        got = s.get("status")
        if got == want:
            ok += 1
        elif want == "active" and got == meta.get("quiet_status", "idle"):
            ok += 1
            notes.append(f"{meta['label']}: {got} rather than active (quiet for longer than the ingest's "
                         f"stall_after by the time this report ran)")
        else:
            problems.append(f"session {short(sid)} ({meta['label']}): status {got}, expected {want}")
        if s.get("user_id") != meta["user"]:
            problems.append(f"session {short(sid)}: user {s.get('user_id')}, expected {meta['user']}")
        if (s.get("parent_session_id") or None) != meta["parent"]:
            problems.append(f"session {short(sid)}: parent {s.get('parent_session_id')}, expected {meta['parent']}")
        if "runtime" in meta and s.get("runtime") != meta["runtime"]:
            problems.append(f"session {short(sid)}: runtime {s.get('runtime')}, expected {meta['runtime']}")
        work = s  # tasks, next_wake_at and activity sit in the session body itself
        if "tasks" in meta:
            got_tasks = {k: (work.get("tasks") or {}).get(k, 0) for k in meta["tasks"]}
            if got_tasks != meta["tasks"]:
                problems.append(f"session {short(sid)} ({meta['label']}): tasks {got_tasks}, expected {meta['tasks']}")
            else:
                work_ok += 1
        if "activity" in meta:
            a = work.get("activity")
            got_act = {"tool_name": a.get("tool_name"), "in_flight": a.get("in_flight")} if a else None
            if got_act != meta["activity"]:
                problems.append(f"session {short(sid)} ({meta['label']}): doing {got_act}, expected "
                                f"{meta['activity']}")
            else:
                act_ok += 1
    for sid in sorted(set(sessions) - set(exp["sessions"])):
        problems.append(f"session {sid}: on the dashboard but not in the workload")
    parts.append(f"statuses {ok}/{len(exp['sessions'])}")
    if any("tasks" in m for m in exp["sessions"].values()):
        parts.append(f"tasks {work_ok}/{len(exp['sessions'])}, doing now {act_ok}/{len(exp['sessions'])}")
    return ", ".join(parts), problems, notes


# ---------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Print the Apiary dashboard from the ingest's read API.")
    ap.add_argument("--url", required=True, help="ingest base URL, e.g. http://127.0.0.1:8080")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--token-file", type=Path, help="file holding a read-scope token")
    g.add_argument("--token", help="a read-scope token (prefer --token-file)")
    ap.add_argument("--expected", type=Path, help="expected.json from workload.py: print a match line")
    ap.add_argument("--from", dest="from_", help="usage range start (RFC 3339 or YYYY-MM-DD; default: 30 days)")
    ap.add_argument("--to", help="usage range end (default: now)")
    ap.add_argument("--tz", help="IANA zone for the range and buckets (default: the ingest's, UTC)")
    args = ap.parse_args(argv)

    token = args.token if args.token else args.token_file.read_text().strip()
    api = Api(args.url, token)
    rng = {"from": args.from_, "to": args.to, "tz": args.tz, "granularity": "total"}
    now = datetime.now(timezone.utc)
    try:
        u_user = api.get("/v1/usage", group_by="user", **rng)
        u_model = api.get("/v1/usage", group_by="model", **rng)
        u_colony = api.get("/v1/usage", group_by="colony", **rng)
        u_session = api.get("/v1/usage", group_by="session,user", **rng)
        sessions = {}
        for row in u_session["rows"]:
            sid = row.get("session_id")
            if sid:
                sessions[sid] = api.get(f"/v1/sessions/{urllib.parse.quote(sid, safe='')}")
        devices = api.get("/v1/devices")["devices"]
        try:
            colony_list = api.get("/v1/colonies", **{k: v for k, v in rng.items() if k != "granularity"})["colonies"]
        except ApiFailure:
            colony_list = []  # an older ingest: no colony keys
        try:
            u_runtime = api.get("/v1/usage", group_by="runtime", **rng)
        except ApiFailure:
            u_runtime = None  # an older ingest: added up from the session rows below
        try:
            u_tool = api.get("/v1/usage", group_by="tool", **rng)
        except ApiFailure:
            u_tool = None  # an older ingest: no tool durations
    except ApiFailure as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError) as e:
        print(f"report: unexpected response shape: {e!r}", file=sys.stderr)
        return 2

    by_user = {r.get("user_id"): r for r in u_user["rows"]}
    by_model = {r.get("model"): r for r in u_model["rows"]}
    # The workload knows colonies by the queen session its workers name; the dashboard groups by colony
    # key where the colony's name was keyed (GET /v1/colonies). Checked by the workers' queen session,
    # added up from the session rows.
    by_colony: dict = {}
    for r in u_session["rows"]:
        s = sessions.get(r.get("session_id")) or {}
        cid = s.get("colony_id") if s.get("colony_id") != s.get("session_id") else None
        acc = by_colony.setdefault(cid or None, {})
        for key in USAGE_KEYS + ["events"] + [k for k in PROVENANCE_KEYS if k in r]:
            acc[key] = acc.get(key, 0) + (r.get(key) or 0)
    by_runtime: dict = {}
    if u_runtime is not None:
        by_runtime = {r.get("runtime") or "(none)": r for r in u_runtime["rows"]}
    else:
        for r in u_session["rows"]:
            rt = (sessions.get(r.get("session_id")) or {}).get("runtime") or "(no session)"
            acc = by_runtime.setdefault(rt, {})
            for key in USAGE_KEYS + ["events"] + [k for k in PROVENANCE_KEYS if k in r]:
                acc[key] = acc.get(key, 0) + (r.get(key) or 0)
    totals = u_user["totals"]
    exp = json.loads(args.expected.read_text()) if args.expected else None
    labels = {sid: m["label"] for sid, m in (exp or {}).get("sessions", {}).items()}

    out = []
    zone = datetime.now().astimezone().tzname()
    out.append(f"Apiary dashboard — {args.url}   usage {u_user.get('from', '?')} .. {u_user.get('to', '?')}"
               f"   (times below in local time, {zone})")
    hdr = [c for c, _ in COLUMNS]
    right = set(range(1, len(hdr) + 1))

    out.append("\nUsage by user")
    rows = [[r.get("user_id") or "(no user)"] + usage_cells(r) for r in u_user["rows"]]
    rows.append(["total"] + usage_cells(totals))
    out.append(table(["user"] + hdr, rows, right))

    out.append("\nUsage by model   (cached and cache-write tokens are part of input; cost = the reported cost, else "
               "the price catalog's estimate; estimated = turns without a reported cost that the catalog priced; "
               "unpriced = neither)" if "cost_reported_nanos" in totals else
               "\nUsage by model   (cached and cache-write tokens are part of input; unpriced = turns whose "
               "provider reported no cost)")
    rows = [[r.get("model")] + usage_cells(r) for r in u_model["rows"] if r.get("model")]
    rest = [r for r in u_model["rows"] if not r.get("model")]
    if rest:
        rows.append(["(not an LLM call)"] + usage_cells(rest[0]))
    out.append(table(["model"] + hdr, rows, right))

    out.append("\nUsage by colony   (by colony key — an HMAC of the colony's name, which never leaves the "
               "device — else the queen session that forked it; its usage is its workers')")
    rows = []
    for r in u_colony["rows"]:
        cid = r.get("colony_id")
        if cid:
            queen = sessions.get(cid, {})
            workers = [s for s in sessions.values()
                       if s.get("colony_id") == cid and s.get("session_id") != cid]
            if cid.startswith(("ck_", "dk_")):
                runs = {run["session_id"] for c in colony_list if c["colony_key"] == cid for run in c["runs"]}
                workers = [s for s in sessions.values()
                           if s.get("colony_id") in runs and s.get("session_id") not in runs]
                queen = sessions.get(next(iter(sorted(runs)), ""), {})
            states = {}
            for w in workers:
                states[w.get("status")] = states.get(w.get("status"), 0) + 1
            wdesc = f"{len(workers)} (" + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")"
            rows.append([short(cid), queen.get("user_id") or "-", wdesc] + usage_cells(r))
        else:
            rows.append(["(none: queens, Claude Code)", "-", "-"] + usage_cells(r))
    out.append(table(["colony", "user", "workers"] + hdr, rows, set(range(3, len(hdr) + 3))))

    out.append("\nUsage by runtime   (the agent runtime that produced the events)" if u_runtime is not None else
               "\nUsage by runtime   (this ingest has no group_by=runtime: the session rows, by session runtime)")
    rows = [[rt] + usage_cells(r) for rt, r in sorted(by_runtime.items())]
    out.append(table(["runtime"] + hdr, rows, right))

    if u_tool is not None:
        out.append("\nTool calls by tool   (durations paired on the device by tool_use_id, or the runtime's own; "
                   "p50/p95 from a histogram, within its bucket)")
        rows = [[r.get("tool_name") or "-", num(r.get("tool_calls", 0)), num(r.get("tool_errors", 0)),
                 num(r.get("tool_calls_timed", 0)), secs(r.get("tool_duration_ms")),
                 secs(r.get("tool_duration_p50_ms")), secs(r.get("tool_duration_p95_ms"))]
                for r in u_tool["rows"]]
        out.append(table(["tool", "calls", "errors", "timed", "total time", "p50", "p95"], rows, {1, 2, 3, 4, 5, 6}))

    counts = {}
    for s in sessions.values():
        counts[s.get("status")] = counts.get(s.get("status"), 0) + 1
    out.append(f"\nSessions ({len(sessions)}): " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items(),
                                                                                         key=lambda kv: str(kv[0]))))
    queens = sorted((s for s in sessions.values() if not s.get("parent_session_id")),
                    key=lambda s: (s.get("user_id") or "", s.get("first_seen_at") or ""))
    children = {}
    for s in sessions.values():
        p = s.get("parent_session_id")
        if p:
            children.setdefault(p, []).append(s)
    orphans = [s for s in sessions.values() if s.get("parent_session_id") and s["parent_session_id"] not in sessions]
    rows = []

    def srow(s, prefix):
        health = (s.get("health") or {}).get("signal") or "-"
        t = s.get("totals") or {}
        label = labels.get(s["session_id"], "")
        work = s  # tasks, next_wake_at and activity sit in the session body itself
        dur = s.get("durations") or {}
        alarming = ("stalled", "failed", "crashed", "needs_attention", "degraded")
        return [s.get("user_id") or "-", prefix + short(s["session_id"]), s.get("runtime") or "-",
                s.get("agent_role") or "-",
                s.get("phase") or "-", (s.get("status") or "?").upper() if s.get("status") in alarming
                else s.get("status") or "?", health, when(s.get("last_event_at"), now),
                tasks_str(work.get("tasks")), doing_str(work.get("activity"), now),
                secs(None if dur.get("active_seconds") is None else dur["active_seconds"] * 1000),
                secs(None if dur.get("wall_clock_seconds") is None else dur["wall_clock_seconds"] * 1000),
                num(t.get("llm_calls", 0)), num(t.get("tool_calls", 0)), cost_str(t), label]
    for q in queens + orphans:
        rows.append(srow(q, ""))
        kids = sorted(children.get(q["session_id"], []), key=lambda s: s.get("first_seen_at") or "")
        for i, k in enumerate(kids):
            rows.append(srow(k, "└ " if i == len(kids) - 1 else "├ "))
    out.append(table(["user", "session", "runtime", "role", "phase", "status", "last health signal", "last event",
                      "tasks", "doing now", "active", "wall clock", "llm", "tools", "cost USD",
                      "(workload label)" if labels else ""], rows, {10, 11, 12, 13, 14}))

    out.append(f"\nDevices ({len(devices)})")
    rows = []
    for d in devices:
        age = d.get("oldest_pending_age_seconds")
        rows.append([d.get("device_id"), d.get("user_id") or "-", "online" if d.get("online") else "OFFLINE",
                     when(d.get("last_heartbeat_at"), now), when(d.get("last_seen_at"), now),
                     num(d.get("backlog_events")), "-" if age is None or not d.get("backlog_events") else f"{age:.0f}s",
                     d.get("agent_version") or "-", d.get("sync_state") or "-"])
    out.append(table(["device", "user", "liveness", "last heartbeat", "last batch", "backlog", "oldest pending",
                      "agent", "sync"], rows, {5}))

    code = 0
    if exp is not None:
        by_tool = {r.get("tool_name"): r for r in u_tool["rows"]} if u_tool is not None else None
        summary, problems, notes = check_expected(exp, by_user, by_model, by_colony, by_runtime, totals, sessions,
                                                  by_tool)
        verdict = "MATCH" if not problems else "MISMATCH"
        out.append(f"\nDashboard vs expected.json (computed by the workload generator from what it wrote): "
                   f"{summary} -> {verdict}")
        for n in notes:
            out.append(f"  note: {n}")
        for p in problems:
            out.append(f"  - {p}")
        if problems:
            code = 1
    print("\n".join(out))
    return code


if __name__ == "__main__":
    sys.exit(main())
