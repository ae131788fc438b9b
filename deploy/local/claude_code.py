#!/usr/bin/env python3
"""Claude Code beside Hive, for Apiary's local demo: its telemetry as OTLP/JSON log exports (python3, stdlib only).

    python3 deploy/local/claude_code.py write --out DIR [--users alice,carol] [--seed 7] [--end ISO]
    python3 deploy/local/claude_code.py post --dir DIR USER=AGENT_DATA_DIR ... [--no-resend]

What Claude Code sends with ``CLAUDE_CODE_ENABLE_TELEMETRY=1 OTEL_LOGS_EXPORTER=otlp
OTEL_EXPORTER_OTLP_PROTOCOL=http/json`` (and, here, ``OTEL_LOG_USER_PROMPTS=1 OTEL_LOG_TOOL_DETAILS=1``, which
Apiary's docs say to leave off: with them on, prompts and tool details reach the agent, which must drop
them): log records named by their body (``claude_code.api_request``), with the standard attributes
(``user.id``, ``session.id``, ``organization.id``, ``user.account_uuid``, ``user.email``, ``terminal.type``,
``prompt.id``, ``event.name``, ``event.timestamp``, ``event.sequence``) and each event's own (see
``tests/fixtures/otlp/claude_code_logs.json``, a real capture, and ``shared-schema/src/otel/mod.rs``).
One Claude Code process per session, its records batched into one export per 5 s the way the OTel JS SDK's
batch processor flushes them (``OTEL_LOGS_EXPORT_INTERVAL``).

The sessions (placed in the same day as workload.py's Hive sessions; same --seed and --end, same bytes):
  alice  K1 flaky refund test (sonnet; small haiku calls; a failing pytest; a 529 overloaded answer retried)
         K2 SQL migration review (sonnet; a connection error without a request id; a failing psql call)
  carol  K3 pricing page copy (opus; a failed WebFetch; its exports gzip-compressed)
         K4 laptop setup script (sonnet), still working: its last request ends 20 s before the end of the day
Numbers are sent both ways Claude Code versions do: as strings (``"cost_usd": "0.0421"``) and as OTLP
values (``intValue``, ``doubleValue``). Costs are what Claude Code computes, in binary floating point.

``write`` writes the exports as ``DIR/<user>/NNN.json`` (the exact bodies ``post`` sends) and prints the
usage they add. workload.py uses this module as a library (``build``) and folds that usage into its
expected.json. ``post`` sends every export of DIR to the user's agent (``POST /v1/logs`` on the address
in ``AGENT_DATA_DIR/otlp.addr``, ``Authorization: Bearer`` the contents of ``AGENT_DATA_DIR/agent.token``),
in time order, requires 200 with nothing rejected, and then sends one export a second time, the way an
exporter retries after a lost answer: Apiary must count it once.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

CANARY = "zzcanary"  # the same marker as workload.py's
SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"
OPUS = "claude-opus-4-1-20250805"
# USD per million tokens: (input, output, cache read, cache write), as Claude Code prices its requests.
PRICES = {SONNET: (3.0, 15.0, 0.30, 3.75), HAIKU: (1.0, 5.0, 0.10, 1.25), OPUS: (15.0, 75.0, 1.50, 18.75)}
SK_ANT = "sk-ant-api03-Q2xhdWRlQ29kZURlbW9Gb3JBcGlhcnlfbm90X2FfcmVhbF9rZXk-Zz34BB"
GHP = "ghp_Kc4T8vWq1Ls6Yn3Hb9Rm2Dx7Fj5Gp0Ae4Uz1"
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJsZWRnZXIifQ.bm90LWEtcmVhbC1zaWduYXR1cmUtY2M"
EXPORT_INTERVAL_MS = 5000
DURABLE = ("api_request", "tool_result", "api_error")  # what Apiary keeps; the rest is filtered
# Attributes the agent must never keep (it keeps service.name, session.id, model, tool_name, tool_use_id,
# numbers, success, status_code, and prompt.id as the trace id): a planted marker may only sit in these.
DROPPED_ATTRIBUTES = {"prompt", "tool_parameters", "tool_input", "error", "user.email", "user.id",
                      "user.account_uuid", "organization.id"}
NANO = Decimal("0.000000001")


# ---------------------------------------------------------------------------------------------------------
# One Claude Code process (= one session)
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Record:
    at_ms: int  # offset from the session start, then (after place()) UNIX milliseconds
    name: str  # short event name: api_request, tool_result, ...
    attrs: list  # OTLP KeyValue list (the event's own attributes, after the standard ones)
    prompt_id: str | None
    seq: int


@dataclass
class Session:
    user: str
    key: str  # K1..K4
    label: str
    sid: str
    style: str  # "string": numbers as strings; "native": intValue / doubleValue
    version: str
    gzip: bool
    status: str  # the status Apiary's health model derives when the demo reads it
    resource: list
    ident: dict  # the user's standard attributes
    records: list[Record] = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    by_model: dict = field(default_factory=dict)
    tools: dict = field(default_factory=dict)  # tool name -> calls, errors, timed calls, duration_ms (its own)
    canaries: int = 0


def kv(key: str, value) -> dict:
    return {"key": key, "value": value}


def s(v: str) -> dict:
    return {"stringValue": v}


class Script:
    """Writes one session's records with its own clock (milliseconds from the session start)."""

    def __init__(self, sess: Session, rng: random.Random, counter):
        self.sess, self.rng, self.counter = sess, rng, counter
        self.t = 0
        self.seq = 0
        self.prompt_id: str | None = None
        self.context = 0  # tokens of the conversation so far (the cached prefix of the next request)
        self.h = f"/home/{sess.user}"
        self.email = f"{sess.user}@example.com"

    def c(self) -> str:
        return self.counter()

    def wait(self, lo_ms: int, hi_ms: int):
        self.t += self.rng.randrange(lo_ms, hi_ms)

    def num(self, n: int) -> dict:
        return s(str(n)) if self.sess.style == "string" else {"intValue": str(n)}

    def record(self, name: str, attrs: list):
        self.seq += 1
        self.sess.records.append(Record(self.t, name, attrs, self.prompt_id, self.seq))

    def prompt(self, text: str):
        self.prompt_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.wait(20_000, 90_000)  # the user types
        self.record("user_prompt", [kv("prompt_length", self.num(len(text))), kv("prompt", s(text))])
        self.context += len(text) // 3 + 40

    def request(self, model=SONNET, *, out=(120, 700), new=(300, 2500), source="repl_main_thread",
                errors: tuple = ()):
        """One API request as Claude Code reports it: ``input_tokens`` is the uncached tail only, the cached
        prefix is ``cache_read_tokens``, what this request adds to the cache ``cache_creation_tokens``."""
        rng = self.rng
        for attempt, (status, message, with_id) in enumerate(errors, 1):
            dur = rng.randrange(800, 30_000)
            self.t += dur
            # no HTTP answer (a connection error): no numeric status; a JS producer's String(undefined) is
            # "undefined", which the agent must take without refusing the record
            code = s(status) if status == "undefined" else self.num(int(status))
            attrs = [kv("model", s(model)), kv("error", s(message)), kv("status_code", code),
                     kv("duration_ms", self.num(dur)), kv("attempt", self.num(attempt))]
            if with_id:
                attrs.append(kv("request_id", s("req_011CV" + rid(rng, 17))))
            attrs.append(kv("speed", s("normal")))
            self.record("api_error", attrs)
            self.sess.usage["events"] += 1  # a health signal: an event, no usage
            self.wait(500, 4000)  # backoff
        if model == HAIKU and source != "repl_main_thread":  # a small side request: no cache
            inp, cr, cw = rng.randrange(250, 900), 0, 0
            output = rng.randrange(*out)
        else:
            cr = self.context
            cw = rng.randrange(*new)
            inp = rng.randrange(3, 40)
            output = rng.randrange(*out)
            self.context += cw + inp + output
        p_in, p_out, p_cr, p_cw = PRICES[model]
        # Claude Code's arithmetic: doubles, summed per token class, printed with the shortest round-trip digits
        cost = inp / 1e6 * p_in + output / 1e6 * p_out + cr / 1e6 * p_cr + cw / 1e6 * p_cw
        dur = rng.randrange(900, 2500) + output * rng.randrange(9, 16)
        self.t += dur
        cost_value = s(repr(cost)) if self.sess.style == "string" else {"doubleValue": cost}
        self.record("api_request", [
            kv("model", s(model)), kv("cost_usd", cost_value), kv("duration_ms", self.num(dur)),
            kv("input_tokens", self.num(inp)), kv("output_tokens", self.num(output)),
            kv("cache_read_tokens", self.num(cr)), kv("cache_creation_tokens", self.num(cw)),
            kv("request_id", s("req_011CV" + rid(rng, 17))), kv("speed", s("normal")),
            kv("query_source", s(source))])
        self.add_usage(model, inp, output, cr, cw, cost)

    def add_usage(self, model, inp, output, cr, cw, cost: float):
        nanos = int((Decimal(repr(cost)) / NANO).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        for m in (self.sess.usage, self.sess.by_model.setdefault(model, zero())):
            m["input_tokens"] += inp + cr + cw  # Apiary's input includes cache reads and writes
            m["output_tokens"] += output
            m["cached_tokens"] += cr
            m["cache_creation_tokens"] += cw
            m["cost_nanos"] += nanos
            m["llm_calls"] += 1
            m["events"] += 1

    def tool(self, name: str, *, params: dict | None = None, tool_input: dict | None = None, ok=True,
             error: str | None = None, dur=(30, 2500), size=(200, 9000)):
        rng = self.rng
        tid = "toolu_01" + rid(rng, 22)
        self.wait(40, 400)
        self.record("tool_decision", [kv("tool_name", s(name)), kv("tool_use_id", s(tid)),
                                      kv("decision", s("accept")), kv("source", s("config"))])
        d = rng.randrange(*dur)
        self.t += d
        attrs = [kv("tool_name", s(name)), kv("tool_use_id", s(tid)), kv("success", s("true" if ok else "false")),
                 kv("duration_ms", self.num(d)), kv("decision_type", s("accept")),
                 kv("decision_source", s("config"))]
        if ok:
            attrs.append(kv("tool_result_size_bytes", self.num(rng.randrange(*size))))
        else:
            attrs += [kv("error_type", s("ToolError")), kv("error", s(error or "failed"))]
        if params is not None:
            attrs.append(kv("tool_parameters", s(json.dumps(params, separators=(",", ":")))))
        if tool_input is not None:
            attrs.append(kv("tool_input", s(json.dumps(tool_input, separators=(",", ":")))))
        self.record("tool_result", attrs)
        u = self.sess.usage
        u["tool_calls"] += 1
        u["tool_errors"] += 0 if ok else 1
        t = self.sess.tools.setdefault(name, {"tool_calls": 0, "tool_errors": 0, "tool_calls_timed": 0,
                                              "tool_duration_ms": 0})
        t["tool_calls"] += 1
        t["tool_errors"] += 0 if ok else 1
        t["tool_calls_timed"] += 1
        t["tool_duration_ms"] += d
        u["events"] += 1
        self.context += rng.randrange(150, 2200)

    def bash(self, command: str, description: str, **kw):
        self.tool("Bash", params={"bash_command": command.split(" ")[0], "full_command": command,
                                  "timeout": 120000, "description": description}, **kw)


def rid(rng: random.Random, n: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(rng.choice(alphabet) for _ in range(n))


USAGE_KEYS = ["input_tokens", "output_tokens", "cached_tokens", "cache_creation_tokens", "cost_nanos",
              "llm_calls", "unpriced_turns", "tool_calls", "tool_errors"]


def zero() -> dict:
    return {k: 0 for k in USAGE_KEYS} | {"events": 0}


# ---------------------------------------------------------------------------------------------------------
# The sessions
# ---------------------------------------------------------------------------------------------------------
def flaky_refund_test(x: Script):
    h, c = x.h, x.c
    x.prompt(f"The refund tests in {h}/src/payments-api are flaky since yesterday, find out why. The sandbox "
             f"key is {SK_ANT} ({c()})")
    x.request(HAIKU, out=(15, 40), source="generate_session_title")
    x.request(out=(150, 300), new=(9000, 14000))
    x.tool("Read", tool_input={"file_path": f"{h}/src/payments-api/tests/test_refunds.py"})
    x.request(out=(120, 260))
    x.bash(f"cd {h}/src/payments-api && pytest tests/test_refunds.py -x -q",
           f"run the refund tests ({c()})", ok=False, dur=(4000, 9000),
           error=f"FAILED tests/test_refunds.py::test_partial_refund - assert 10.01 == 10.0 in "
                 f"{h}/src/payments-api/tests/test_refunds.py:88 ({c()})")
    x.request(out=(200, 420), errors=(("529", '{"type":"error","error":{"type":"overloaded_error","message":'
                                               '"Overloaded"}}', True),))
    x.tool("Grep", params={"pattern": "ROUND_HALF", "path": f"{h}/src/payments-api"}, dur=(60, 400))
    x.request(out=(400, 800))
    x.prompt(f"Fix it, then mail the summary to {x.email} ({c()})")
    x.request(out=(200, 500))
    x.tool("Edit", tool_input={"file_path": f"{h}/src/payments-api/payments/refunds.py",
                               "old_string": "ROUND_HALF_EVEN", "new_string": f"ROUND_HALF_UP  # {c()}"})
    x.request(out=(100, 200))
    x.bash(f"cd {h}/src/payments-api && pytest tests/test_refunds.py -q", "run the refund tests again",
           dur=(4000, 9000))
    x.request(out=(300, 700))


def migration_review(x: Script):
    h, c = x.h, x.c
    x.prompt(f"Review the migration {h}/src/ledger/migrations/0042_split_entries.sql before I ship it; staging "
             f"is postgres://ledger:{JWT}@staging-db/ledger ({c()})")
    x.request(HAIKU, out=(15, 40), source="generate_session_title")
    x.request(out=(150, 300), new=(9000, 14000), errors=(("undefined", "Connection error.", False),))
    x.tool("Read", tool_input={"file_path": f"{h}/src/ledger/migrations/0042_split_entries.sql"})
    x.request(out=(200, 400))
    x.bash(f"psql postgres://ledger:{JWT}@staging-db/ledger -c '\\d entries'", f"inspect the table ({c()})",
           ok=False, dur=(1500, 4000), error=f"psql: error: connection to server failed: FATAL: password "
                                             f"authentication failed for user \"ledger\" ({c()})")
    x.request(out=(200, 400))
    x.tool("Read", tool_input={"file_path": f"{h}/src/ledger/models/entry.py"})
    x.request(out=(600, 1100))


def pricing_copy(x: Script):
    h, c = x.h, x.c
    x.prompt(f"Rewrite the pricing page copy in {h}/Documents/site/pricing.md for the new tiers; ask "
             f"{x.email} about the enterprise wording ({c()})")
    x.request(HAIKU, out=(15, 40), source="generate_session_title")
    x.request(OPUS, out=(150, 300), new=(9000, 14000))
    x.tool("WebSearch", params={"query": f"developer tools pricing page enterprise tier ({c()})"},
           dur=(1500, 5000))
    x.request(OPUS, out=(150, 300))
    x.tool("WebFetch", params={"url": "https://competitor.example.org/pricing"}, ok=False, dur=(800, 3000),
           error=f"Request failed with status code 403 ({c()})")
    x.request(OPUS, out=(200, 400))
    x.tool("Read", tool_input={"file_path": f"{h}/Documents/site/pricing.md"})
    x.request(OPUS, out=(900, 1600))
    x.tool("Write", tool_input={"file_path": f"{h}/Documents/site/pricing.md", "content": f"# Pricing ({c()})"})
    x.request(OPUS, out=(150, 300))


def laptop_setup(x: Script):
    h, c = x.h, x.c
    x.prompt(f"Write a setup script for new laptops at {h}/src/it/setup.sh: brew, dotfiles, and the GitHub "
             f"token {GHP} for the private taps ({c()})")
    x.request(HAIKU, out=(15, 40), source="generate_session_title")
    x.request(out=(150, 300), new=(9000, 14000))
    x.tool("Read", tool_input={"file_path": f"{h}/src/it/README.md"})
    x.request(out=(600, 1200))
    x.tool("Write", tool_input={"file_path": f"{h}/src/it/setup.sh", "content": f"#!/bin/sh\n# {c()}\n"})
    x.request(out=(100, 250))
    x.bash(f"shellcheck {h}/src/it/setup.sh", "lint the script", dur=(300, 1200))
    x.request(out=(200, 400))


# (user, key, label, script, model style, version, gzip, placement, status)
# placement: ("at", fraction of the day) or ("end", seconds before the end of the day of the last record)
# status: a Claude Code session never reports its end; it is interactive (driven by its user turn by
# turn), so once quiet for longer than the ingest's stall_after (5 min) it reads `idle` (quiet_interactive).
SESSIONS = [
    ("alice", "K1", "K1 flaky refund test (Claude Code)", flaky_refund_test, "string", "2.0.14", False,
     ("at", 0.22), "idle"),
    ("alice", "K2", "K2 SQL migration review (Claude Code)", migration_review, "native", "2.1.210", False,
     ("at", 0.66), "idle"),
    ("carol", "K3", "K3 pricing page copy (Claude Code)", pricing_copy, "native", "2.1.210", True,
     ("at", 0.38), "idle"),
    ("carol", "K4", "K4 laptop setup script (Claude Code, active)", laptop_setup, "string", "2.1.210", False,
     ("end", 20), "active"),
]
DEFAULT_USERS = sorted({u for u, *_ in SESSIONS})


def identity_of(user: str, seed: int) -> dict:
    """A user's standard attributes: stable for the user (and the seed), the same in every session."""
    rng = random.Random(f"{seed}/claude_code/identity/{user}")
    org = random.Random(f"{seed}/claude_code/organization")
    return {
        "user.id": "%064x" % rng.getrandbits(256),
        "organization.id": str(uuid.UUID(int=org.getrandbits(128), version=4)),
        "user.account_uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "user.email": f"{user}@example.com",
    }


def epoch_ms(local: datetime) -> int:
    """A naive local time (as workload.py keeps them) as UNIX milliseconds."""
    return round(local.timestamp() * 1000)


def build(users: list[str], seed: int, day_start: datetime, end: datetime) -> list[Session]:
    """The Claude Code sessions of `users` in the day [day_start, end], records placed in UNIX milliseconds."""
    out = []
    span_ms = epoch_ms(end) - epoch_ms(day_start)
    for user, key, label, fn, style, version, gz, (how, value), status in SESSIONS:
        if user not in users:
            continue
        rng = random.Random(f"{seed}/claude_code/{user}/{key}")
        ident = identity_of(user, seed)
        sess = Session(user=user, key=key, label=label, sid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                       style=style, version=version, gzip=gz, status=status, ident=ident, resource=[
                           kv("service.name", s("claude-code")), kv("service.version", s(version)),
                           kv("os.type", s("linux")), kv("os.version", s("6.8.0-49-generic")),
                           kv("host.arch", s("amd64")),
                           # OTEL_RESOURCE_ATTRIBUTES=department=...,team.contact=...
                           kv("department", s("engineering")),
                       ], usage=zero())

        def counter(sess=sess):
            sess.canaries += 1
            return f"{CANARY}{sess.user[:1]}k{sess.key[1:]}{sess.canaries:02d}"

        sess.resource.append(kv("team.contact", s(f"{user}@example.com ({counter()})")))
        x = Script(sess, rng, counter)
        fn(x)
        if how == "at":
            base = epoch_ms(day_start) + int(span_ms * value)
        else:
            base = epoch_ms(end) - value * 1000 - sess.records[-1].at_ms
        for r in sess.records:
            r.at_ms += base
        if sess.records[-1].at_ms > epoch_ms(end):
            raise SystemExit(f"internal error: {label} runs past the end of the day")
        out.append(sess)
    return out


# ---------------------------------------------------------------------------------------------------------
# Exports
# ---------------------------------------------------------------------------------------------------------
def otlp_record(sess: Session, r: Record) -> dict:
    utc = datetime.fromtimestamp(r.at_ms // 1000, timezone.utc)
    iso = utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{r.at_ms % 1000:03d}Z"
    nanos = str(r.at_ms * 1_000_000)
    std = [kv("user.id", s(sess.ident["user.id"])), kv("session.id", s(sess.sid)),
           kv("organization.id", s(sess.ident["organization.id"])),
           kv("user.account_uuid", s(sess.ident["user.account_uuid"])),
           kv("user.email", s(sess.ident["user.email"])), kv("terminal.type", s("vscode"))]
    if r.prompt_id:
        std.append(kv("prompt.id", s(r.prompt_id)))
    std += [kv("event.name", s(r.name)), kv("event.timestamp", s(iso)), kv("event.sequence", s(str(r.seq)))]
    return {"timeUnixNano": nanos, "observedTimeUnixNano": nanos, "body": s(f"claude_code.{r.name}"),
            "attributes": std + r.attrs}


def exports(sess: Session) -> list[tuple[int, dict]]:
    """The session's export requests: (time of the flush, ExportLogsServiceRequest as OTLP/JSON)."""
    batches: dict[int, list[Record]] = {}
    start = sess.records[0].at_ms
    for r in sess.records:
        batches.setdefault((r.at_ms - start) // EXPORT_INTERVAL_MS, []).append(r)
    out = []
    for _, recs in sorted(batches.items()):
        body = {"resourceLogs": [{"resource": {"attributes": sess.resource}, "scopeLogs": [{
            "scope": {"name": "com.anthropic.claude_code.events", "version": sess.version},
            "logRecords": [otlp_record(sess, r) for r in recs]}]}]}
        out.append((recs[-1].at_ms, body))
    return out


def write_exports(sessions: list[Session], out: Path) -> dict[str, list[str]]:
    """Writes DIR/<user>/NNN.json (NNN in time order per user; .json.gz when the session gzips); returns the
    files per user, relative to DIR."""
    per_user: dict[str, list[tuple[int, Session, dict]]] = {}
    for sess in sessions:
        for at, body in exports(sess):
            per_user.setdefault(sess.user, []).append((at, sess, body))
    files: dict[str, list[str]] = {}
    for user, items in sorted(per_user.items()):
        d = out / user
        d.mkdir(parents=True, exist_ok=True)
        for n, (_, sess, body) in enumerate(sorted(items, key=lambda i: i[0]), 1):
            raw = (json.dumps(body, separators=(",", ":")) + "\n").encode()
            name = f"{n:03d}.json" + (".gz" if sess.gzip else "")
            (d / name).write_bytes(gzip.compress(raw, mtime=0) if sess.gzip else raw)
            files.setdefault(user, []).append(name)
    return files


def leak_patterns(sessions: list[Session]) -> list[str]:
    """The identity attributes the agent must drop, as extra leak patterns (the account and organization ids
    and the hashed user id; e-mails are already covered by @example.com)."""
    pats = []
    for sess in sessions:
        for k in ("user.id", "user.account_uuid", "organization.id"):
            if sess.ident[k] not in pats:
                pats.append(sess.ident[k])
    return pats


# ---------------------------------------------------------------------------------------------------------
# Posting
# ---------------------------------------------------------------------------------------------------------
def post_export(addr: str, token: str, raw: bytes, gz: bool, timeout=30.0, attempts=8) -> dict:
    """POST /v1/logs; retries 429/502/503/504 after Retry-After like an OTLP exporter; returns the response."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    for attempt in range(1, attempts + 1):
        req = urllib.request.Request(f"http://{addr}/v1/logs", data=raw, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", "replace")[:300]
            if e.code in (429, 502, 503, 504) and attempt < attempts:
                time.sleep(min(5.0, float(e.headers.get("Retry-After") or 1)))
                continue
            raise SystemExit(f"claude_code: POST http://{addr}/v1/logs -> HTTP {e.code}: {body}") from None
        except (urllib.error.URLError, OSError) as e:
            if attempt < attempts:
                time.sleep(1.0)
                continue
            raise SystemExit(f"claude_code: POST http://{addr}/v1/logs failed: {e}") from None
    raise AssertionError("unreachable")


def rejected_of(resp: dict) -> tuple[int, str]:
    ps = resp.get("partialSuccess") or resp.get("partial_success") or {}
    n = ps.get("rejectedLogRecords") or ps.get("rejected_log_records") or 0
    return int(n), ps.get("errorMessage") or ps.get("error_message") or ""


def cmd_post(a) -> int:
    base = Path(a.dir)
    agents = {}
    for spec in a.agents:
        user, _, d = spec.partition("=")
        agents[user] = Path(d)
    sent = records = 0
    first_with_usage = None
    for user, data_dir in agents.items():
        files = sorted((base / user).glob("*.json*")) if (base / user).is_dir() else []
        if not files:
            continue
        try:
            addr = (data_dir / "otlp.addr").read_text().strip()
            token = (data_dir / "agent.token").read_text().strip()
        except OSError as e:
            raise SystemExit(f"claude_code: {user}'s agent has no OTLP receiver ({e}); is [otlp] enabled?") from None
        n_user = 0
        for f in files:
            raw = f.read_bytes()
            gz = f.name.endswith(".gz")
            body = json.loads(gzip.decompress(raw) if gz else raw)
            recs = [r for rl in body["resourceLogs"] for sl in rl["scopeLogs"] for r in sl["logRecords"]]
            resp = post_export(addr, token, raw, gz)
            rejected, msg = rejected_of(resp)
            if rejected:
                raise SystemExit(f"claude_code: {user}/{f.name}: the agent rejected {rejected} record(s): {msg}")
            sent += 1
            n_user += len(recs)
            if first_with_usage is None and any(r["body"]["stringValue"] == "claude_code.api_request" for r in recs):
                first_with_usage = (user, f, addr, token, raw, gz, len(recs))
        records += n_user
        say(f"{user}: {len(files)} exports, {n_user} log records -> OTLP receiver http://{addr}/v1/logs")
    if a.resend and first_with_usage:
        user, f, addr, token, raw, gz, n = first_with_usage
        rejected, msg = rejected_of(post_export(addr, token, raw, gz))
        if rejected:
            raise SystemExit(f"claude_code: resent {user}/{f.name}: rejected {rejected}: {msg}")
        say(f"{user}: sent {f.name} ({n} records, with an api_request) a second time, as an exporter retries "
            f"after a lost answer: it must count once")
    say(f"{sent} exports, {records} records; every one answered 200 with nothing rejected")
    return 0


def say(msg: str):
    print(f"claude_code: {msg}", file=sys.stderr, flush=True)


def summary(sessions: list[Session]) -> str:
    n_rec = sum(len(x.records) for x in sessions)
    dur = sum(1 for x in sessions for r in x.records if r.name in DURABLE)
    cost = sum(x.usage["cost_nanos"] for x in sessions) / 1e9
    calls = sum(x.usage["llm_calls"] for x in sessions)
    tools = sum(x.usage["tool_calls"] for x in sessions)
    users = sorted({x.user for x in sessions})
    return (f"{len(sessions)} Claude Code sessions of {', '.join(users)}: {n_rec} log records ({dur} durable), "
            f"{calls} API requests, {tools} tool results, ${cost:.4f}")


def cmd_write(a) -> int:
    users = [u.strip() for u in a.users.split(",") if u.strip()]
    end = datetime.fromisoformat(a.end) if a.end else (datetime.now() - timedelta(seconds=60)).replace(microsecond=0)
    day_start = end - timedelta(hours=9)
    sessions = build(users, a.seed, day_start, end)
    files = write_exports(sessions, Path(a.out))
    say(summary(sessions) + f"; {sum(len(v) for v in files.values())} exports in {a.out}")
    for x in sessions:
        print(json.dumps({"session": x.sid, "user": x.user, "label": x.label, "usage": x.usage}))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("write", help="write the exports of a day (standalone; workload.py does this for the demo)")
    p.add_argument("--out", required=True)
    p.add_argument("--users", default=",".join(DEFAULT_USERS))
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--end", help="end of the day, naive local ISO time (default: one minute ago)")
    p.set_defaults(fn=cmd_write)
    p = sub.add_parser("post", help="send the exports of DIR/<user>/ to each user's agent")
    p.add_argument("--dir", required=True)
    p.add_argument("--no-resend", dest="resend", action="store_false",
                   help="do not send one export a second time")
    p.add_argument("agents", nargs="+", metavar="USER=AGENT_DATA_DIR")
    p.set_defaults(fn=cmd_post)
    a = ap.parse_args(argv)
    return a.fn(a) or 0


if __name__ == "__main__":
    sys.exit(main())
