#!/usr/bin/env python3
"""A small team's day of Hive output, for Apiary's local demo (python3, stdlib only).

    python3 deploy/local/workload.py --out .apiary/demo/hive [--seed 7] [--users alice,bob,carol]
                                     [--end 2026-11-22T15:40:00] [--trickle SECONDS]

Writes one HIVE_HOME per user under OUT/<user>/ exactly the way Hive writes it (see
tests/fixtures/hive/README.md): the always-on per-session logs
``queens/<profile>/sessions/<session_id>/events.jsonl`` (queen and her colony workers in one file, streaming
deltas coalesced), and for alice also the ``HIVE_DEBUG_EVENTS=1`` log ``event_logs/<YYYYmmdd_HHMMSS>.jsonl``
(every event of the process, deltas included), so the same events arrive through two logs and must dedup.
Beside Hive, some users also run Claude Code (``--claude-code``, default alice and carol): its telemetry,
as the OTLP/JSON log exports Claude Code would send, goes to ``OUT/claude_code/<user>/NNN.json[.gz]``
(deploy/local/claude_code.py builds them; ``claude_code.py post`` sends them to the users' agents).
Each colony also gets its directory, ``colonies/<name>/``, as Hive keeps it (an agent's settings page lists
them with their keys).
Then OUT/expected.json: totals the generator computed itself (by user, model, colony, session; Hive and
Claude Code together), the session statuses a dashboard should show, and the sensitive markers that must
never leave a device.

The day (3 users, 10 queen sessions, 1 agent run, 8 colony workers):
  alice  A1 CI failure Q&A (haiku + gpt-5-mini, a failing gh call, an unpriced turn)        completed
         A2 billing refactor: phases independent > incubating > working > reviewing, tasks,
            context compaction, colony "billing_refactor" with 3 parallel workers:
            render split (haiku, ok) / tax extraction (sonnet, fails) / fixtures (gpt-5-mini)  completed
         A3 release notes: asks the user a question (ask_user still in flight)               waiting
  bob    B1 SQL review (sonnet, a tool error)                                                 completed
         B2 ETL backfill: colony "etl_backfill" started in the background, 3 workers:
            schema check (haiku, ok) / backfill (sonnet) that goes quiet: stream_inactive,
            nudge, node_stalled, and never finishes                                          worker stalled
            / partition cleanup (haiku) that asks its queen (escalation_requested)          worker needs_attention
         B3 dependency upgrade (haiku + gpt-5-mini, unpriced turns, tool errors)             completed
         B4 flaky integration suite: still working, 3 failed test runs in its last turns    degraded
  carol  C1 market research (gpt-5-mini, web searches, unpriced turns)                       completed
         C2 docs refresh: colony "docs_refresh", 2 workers (sonnet, haiku), tasks             completed
         C3 onboarding checklist: still working, last turn a minute before "now"             active
         C4 weekly digest: `hive run digest_agent` (agents/digest_agent/sessions/<id>/), its
            process dies mid-tool-call; its state.json names the dead pid                    crashed
and in Claude Code (claude_code.py; no colonies, no end event: a quiet session waits for its user, idle):
  alice  K1 flaky refund test, K2 SQL migration review                                    idle (quiet)
  carol  K3 pricing page copy (opus); K4 laptop setup script, its last request 20 s before the end  active

expected.json also holds each session's task counts and the tool call in flight (what the status API calls
activity), and tool calls by tool with their durations (paired by tool_use_id as the agent pairs them).

Timestamps are today's date in naive local time (as Hive writes them), spread over the hours before
``--end`` (default: one minute ago); the stalled worker's last signal is ~6 minutes before the end, the
waiting question ~4 minutes, the active session's last turn at the end. The same --seed and --end give
byte-identical output. ``--trickle SECONDS`` writes the last part of the day live (line by line over that
many seconds, some lines in two pieces as Hive's flushes can leave them), so a tailing agent sees events
arrive; without it everything is written at once.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

# How Hive writes its logs (buses, seq, tool_index, coalesced deltas), the prices, the durable types and the
# sensitive keys: shared with the fixture generator, tests/fixtures/hive/hivelog.py.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hive"))
from hivelog import (  # noqa: E402
    DELTA_TYPES, DURABLE_TYPES, GPT, HAIKU, PRICES, SENSITIVE_KEYS, SONNET, Bus, Emission, chunks, cost_of, flush,
    publish, session_lines,
)
# Claude Code beside Hive: its sessions and their OTLP exports (deploy/local/claude_code.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import claude_code  # noqa: E402

# Marker planted in every piece of user content; none may ever reach the outbox, a batch or the cloud.
CANARY = "zzcanary"
# Other strings that would betray a leak (secrets and personal data inside the content).
LEAK_PATTERNS = [CANARY, "/home/", "@example.com", "sk-ant-", "sk-proj-", "ghp_", "eyJhbGci"]
SK_ANT = "sk-ant-api03-RGVtb0tleUZvckFwaWFyeUxvY2FsRGVtb19ub3RfYV9yZWFsX2tleQ-Xy12AA"
SK_PROJ = "sk-proj-8hT2kW9qZ4vN7xB1mC5pL3rY6sD0fG2jK4aQ8eU1iO7tR9wE3yH5nM2bV6cX0zAs"
GHP = "ghp_Dm9X2kLq7Wn4Rt8Yv1Bz5Hc3Jf6Gs0Pa2Ek9"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZW1vIn0.bm90LWEtcmVhbC1zaWduYXR1cmU"

NOMINAL_DAY_HOURS = 9.0


# ---------------------------------------------------------------------------------------------------------
# A user's Hive process: its emissions, published through hivelog in time order
# ---------------------------------------------------------------------------------------------------------
class Home:
    """One user's HIVE_HOME: every emission of that user's Hive process, published in time order."""

    def __init__(self, user: str, root: Path, debug_log: bool):
        self.user, self.root, self.debug = user, root, debug_log
        self.emissions: list[Emission] = []
        self.global_bus = Bus(None)
        self.order = 0
        self.sessions: dict[str, dict] = {}  # sid -> metadata for expected.json
        self.canaries = 0
        self.writes: list[tuple[datetime, Path, str]] = []  # (publish time, file, line) in write order
        self.state_files: list[tuple[Path, dict]] = []  # Hive's state.json of agent runs, written last
        self.colony_dirs: list[str] = []  # colonies/<name>/ as Hive keeps each colony, made with the files

    def canary(self) -> str:
        self.canaries += 1
        return f"{CANARY}{self.user[:1]}{self.canaries:04d}"

    def add(self, ts, bus, type_, stream_id, node_id, execution_id, data, correlation_id=None, colony_id=None,
            run_id=None, session=None):
        self.order += 1
        em = Emission(ts, self.order, bus, type_, stream_id, node_id, execution_id, data, correlation_id,
                      colony_id, run_id, session=session)
        self.emissions.append(em)
        return em

    def publish_all(self):
        self.emissions.sort(key=lambda e: (e.ts, e.order))
        debug_path = None
        if self.debug and self.emissions:
            debug_path = self.root / "event_logs" / (self.emissions[0].ts.strftime("%Y%m%d_%H%M%S") + ".jsonl")
        buses = []
        for em in self.emissions:
            bus = em.bus
            if bus not in buses:
                buses.append(bus)
            d = publish(em)
            em.data = d["data"]
            if debug_path is not None:
                self.writes.append((em.ts, debug_path, json.dumps(d)))
            if bus.session_log is not None:
                for line in session_lines(em, d):
                    self.writes.append((em.ts, bus.session_log, json.dumps(line)))
        end = self.emissions[-1].ts if self.emissions else datetime.min
        for bus in buses:
            for line in flush(bus):
                self.writes.append((end, bus.session_log, json.dumps(line)))


# ---------------------------------------------------------------------------------------------------------
# Actors and scripting helpers
# ---------------------------------------------------------------------------------------------------------
class Actor:
    """A queen or a colony worker, with its own clock."""

    def __init__(self, home: Home, rng: random.Random, kind: str, sid: str, bus: Bus, start: datetime,
                 queen_sid: str | None = None):
        self.home, self.rng, self.kind, self.sid, self.bus, self.t = home, rng, kind, sid, bus, start
        self.queen_sid = queen_sid
        if kind == "queen":
            self.stream_id, self.node_id, self.colony_id = "queen", "queen", None
        elif kind == "agent":  # `hive run <agent>`: one agent's execution in its own session, stream "default"
            self.stream_id, self.node_id, self.colony_id = "default", "main", None
        else:
            self.stream_id, self.node_id, self.colony_id = f"worker:{sid}", sid, queen_sid
        self.iteration = 0
        self.prev_context = 6000 if kind == "worker" else 9000
        self.tool_calls = 0
        self.tokens = 0
        self.started = start

    def tick(self, lo=0.05, hi=0.4) -> datetime:
        self.t += timedelta(seconds=self.rng.uniform(lo, hi))
        if self.t.microsecond == 0:
            self.t += timedelta(microseconds=1)
        return self.t

    def emit(self, type_, data, *, lo=0.05, hi=0.4, at=None, stream_id=..., node_id=..., execution_id=...,
             correlation_id=None, run_id=None, session=None):
        if at is not None:
            self.t = at
            ts = at
        else:
            ts = self.tick(lo, hi)
        return self.home.add(
            ts, self.bus, type_,
            self.stream_id if stream_id is ... else stream_id,
            self.node_id if node_id is ... else node_id,
            self.sid if execution_id is ... else execution_id,
            data, correlation_id=correlation_id, colony_id=self.colony_id, run_id=run_id,
            session=session or self.sid)

    def queen_only(self, type_, data, **kw):
        """Queen-level events built as AgentEvent(type, stream_id="queen", data): no node, no execution."""
        return self.emit(type_, data, node_id=None, execution_id=None, **kw)


class Tool:
    def __init__(self, name, tool_input, result, is_error=False, during=None, wait=(0.3, 2.5), complete=True):
        self.name, self.input, self.result, self.is_error = name, tool_input, result, is_error
        self.during, self.wait, self.complete = during, wait, complete


def hexid(rng: random.Random, n=8) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def rid(rng: random.Random, n: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(rng.choice(alphabet) for _ in range(n))


def session_id(rng: random.Random, at: datetime) -> str:
    return f"session_{at.strftime('%Y%m%d_%H%M%S')}_{hexid(rng)}"


def context_usage(a: Actor, est: int, msgs: int, trigger="pre_turn"):
    max_ctx = 200_000 if a.kind == "queen" else 128_000
    a.emit("context_usage_updated", {
        "usage_ratio": round(est / max_ctx, 4), "usage_pct": round(est / max_ctx * 100), "message_count": msgs,
        "estimated_tokens": est, "max_context_tokens": max_ctx, "trigger": trigger,
        "breakdown": {"conversation_chars": est * 3, "system_chars": 14800, "tool_defs_chars": 6200,
                      "image_blocks": 0, "image_tokens": 0}}, execution_id=None)


def turn(a: Actor, model: str, *, steps: list[dict], stop: str, new: int, out: int, cache="warm",
         cost="reported", credits=None, judge: str | None = "CONTINUE", think=1.5, finished=True):
    """One agent-loop iteration: deltas and tool calls, then llm_turn_complete with the summed usage
    (cached and cache-creation tokens are INCLUDED in input_tokens)."""
    rng = a.rng
    it = a.iteration
    a.iteration += 1
    a.emit("node_loop_iteration", {"iteration": it})
    context_usage(a, a.prev_context + new, 3 + 4 * it)
    for n, step in enumerate(steps):
        a.tick(think * 0.6, think * 1.4)
        if step.get("reasoning"):
            acc = ""
            for part in chunks(step["reasoning"], 3):
                acc += part
                a.emit("llm_reasoning_delta", {"content": part, "inner_turn": n, "iteration": it, "snapshot": acc},
                       lo=0.08, hi=0.3)
        if step.get("text"):
            acc = ""
            for part in chunks(step["text"], 4):
                acc += part
                if a.kind == "queen":
                    a.emit("client_output_delta", {"content": part, "snapshot": acc, "inner_turn": n,
                                                   "iteration": it}, lo=0.05, hi=0.25)
                else:
                    a.emit("llm_text_delta", {"content": part, "snapshot": acc, "inner_turn": n}, lo=0.05, hi=0.25)
        for tool in step.get("tools", []):
            tid = ("call_" + rid(rng, 24)) if model == GPT else ("toolu_01" + rid(rng, 22))
            a.emit("tool_call_started", {"tool_use_id": tid, "tool_name": tool.name, "tool_input": tool.input})
            if tool.during:
                tool.during(a)
            if not tool.complete:
                continue
            a.tick(*tool.wait)
            a.emit("tool_call_completed", {"tool_use_id": tid, "tool_name": tool.name, "result": tool.result,
                                           "is_error": tool.is_error})
            a.tool_calls += 1
        for extra in step.get("after", []):
            extra(a)
    if not finished:  # still inside the iteration (a tool waits): Hive has not emitted llm_turn_complete yet
        return
    inner_n = max(1, len(steps))
    inp = (a.prev_context + new) * inner_n + rng.randrange(0, 400)
    if model == GPT:
        cached = (a.prev_context * inner_n // 1024) * 1024 if cache == "warm" else 0
        cc = 0
    else:
        cached = a.prev_context * inner_n if cache == "warm" else 0
        cc = new + rng.randrange(0, 300) if cache == "warm" else int(inp * 0.85)
    cached = min(cached, inp)
    cc = min(cc, inp - cached)
    data = {"stop_reason": stop, "model": model, "input_tokens": inp, "output_tokens": out, "cached_tokens": cached,
            "cache_creation_tokens": cc,
            "cost_usd": cost_of(model, inp, cached, cc, out) if cost == "reported" else 0.0}
    if credits is not None:
        data["credits"] = credits
    data["iteration"] = it
    a.tick(out / 90, out / 60)
    a.emit("llm_turn_complete", data, lo=0.01, hi=0.05)
    a.prev_context += new + out
    a.tokens += inp + out
    if judge:
        a.emit("judge_verdict", {"action": judge, "feedback": "" if judge != "RETRY" else
                                 f"The output is missing the test results ({a.home.canary()}).",
                                 "judge_type": "implicit", "iteration": it})


def loop_state(a: Actor, activity, park_reason=None, questions=None):
    a.emit("loop_state_changed", {"activity": activity, "park_reason": park_reason, "interrupt_cause": None,
                                  "questions": questions})


class Ctx:
    """What a session script gets: the user's home, a private RNG, the start time, the queen profile."""

    def __init__(self, home: Home, rng: random.Random, start: datetime, profile: str):
        self.home, self.rng, self.start, self.profile = home, rng, start, profile
        self.user = home.user
        self.h = f"/home/{home.user}"
        self.email = f"{home.user}@example.com"
        self.anchor: datetime | None = None  # the moment that is pinned to a wall time (see place())

    def c(self) -> str:
        return self.home.canary()

    def new_queen(self, label: str) -> Actor:
        sid = session_id(self.rng, self.start)
        bus = Bus(self.home.root / "queens" / self.profile / "sessions" / sid / "events.jsonl")
        q = Actor(self.home, self.rng, "queen", sid, bus, self.start)
        self.home.sessions[sid] = {"user": self.user, "role": "queen", "parent": None, "colony": None,
                                   "label": label, "status": None}
        return q

    def new_worker(self, q: Actor, start: datetime, label: str, colony_name: str) -> Actor:
        sid = session_id(self.rng, start)
        w = Actor(self.home, self.rng, "worker", sid, q.bus, start, queen_sid=q.sid)
        self.home.sessions[sid] = {"user": self.user, "role": "worker", "parent": q.sid, "colony": q.sid,
                                   "colony_name": colony_name, "label": label, "status": None}
        return w

    def new_agent_run(self, label: str, agent: str) -> Actor:
        """A `hive run` of one agent: its own session directory under agents/<agent>/sessions/ (events.jsonl
        and state.json); a top-level session (no colony)."""
        sid = session_id(self.rng, self.start)
        bus = Bus(self.home.root / "agents" / agent / "sessions" / sid / "events.jsonl")
        a = Actor(self.home, self.rng, "agent", sid, bus, self.start)
        self.home.sessions[sid] = {"user": self.user, "role": "queen", "parent": None, "colony": None,
                                   "label": label, "status": None}
        return a

    def state_file(self, a: Actor, agent: str):
        """The state.json Hive's execution manager keeps for a running execution (status active, the owning
        process's pid: filled in when written, see main)."""
        self.home.state_files.append((self.home.root / "agents" / agent / "sessions" / a.sid / "state.json", {
            "schema_version": "1.1", "session_id": a.sid, "stream_id": "default", "status": "active",
            "goal_id": agent, "agent_id": agent, "entry_point": "start",
            "timestamps": {"started_at": a.started.isoformat(), "updated_at": a.t.isoformat()},
            "progress": {"current_node": a.node_id, "path": [a.node_id]},
            "memory": {"notes": f"private working memory of {self.h}/digest ({self.c()})"},
            "input_data": {"topic": f"escalations for {self.email} ({self.c()})"},
            "pid": None, "isolation_level": "shared"}))

    def status(self, a: Actor, status: str):
        self.home.sessions[a.sid]["status"] = status

    # -- common pieces -------------------------------------------------------------------------------------
    def queen_start(self, q: Actor, message: str, phase="independent", identity_reason="default_profile"):
        q.queen_only("queen_identity_selected", {"queen_id": self.profile, "name": "Ada", "profile": self.profile,
                                                 "reason": identity_reason})
        q.queen_only("queen_phase_changed", {"phase": phase})
        q.run = "run_" + hexid(self.rng, 12)
        q.emit("execution_started", {"input": {"user_message": message, "attachments": []}}, node_id=None,
               run_id=q.run)
        q.emit("node_loop_started", {"max_iterations": 200})
        loop_state(q, "executing")
        self.user_message(q, message)

    def user_message(self, q: Actor, message: str, lo=0.05, hi=0.4):
        corr = "chat_" + hexid(self.rng, 16)
        received = q.emit("client_input_received", {"content": message, "message_id": "msg_" + hexid(self.rng, 12)},
                          correlation_id=corr, lo=lo, hi=hi)
        committed = q.emit("client_input_committed", {"seq": 0}, correlation_id=corr)
        committed.seq_of = received

    def queen_end(self, q: Actor, summary: str, lo=5, hi=30):
        q.emit("node_loop_completed", {"iterations": q.iteration}, lo=0.05, hi=0.2)
        q.emit("execution_completed", {"output": {"summary": summary}}, node_id=None, run_id=q.run, lo=lo, hi=hi)
        self.status(q, "completed")

    def worker_start(self, w: Actor):
        w.emit("node_loop_started", {"max_iterations": 60}, at=w.t)

    def worker_end(self, w: Actor, task: str, batch: str, idx: int, size: int, *, success: bool, summary: str,
                   error: str | None = None):
        w.emit("node_loop_completed", {"iterations": w.iteration})
        w.emit("execution_completed" if success else "execution_failed",
               {"worker_id": w.sid, "colony_id": w.queen_sid, "task": task, "success": success, "error": error,
                "output_keys": ["summary"] if success else []})
        w.emit("subagent_report", {
            "worker_id": w.sid, "colony_id": w.queen_sid, "task": task, "status": "success" if success else "failed",
            "summary": summary, "data": {"notes": f"see the worker transcript ({self.c()})"}, "error": error,
            "duration_seconds": round((w.t - w.started).total_seconds() + 0.2, 3), "tokens_used": w.tokens,
            "tool_calls_used": w.tool_calls, "budget_limited": False, "tool_call_lifetime_budget": 80,
            "budget_pinned": False, "batch_id": batch, "batch_index": idx, "batch_size": size,
            "output_file": f"{self.h}/.hive/queens/{self.profile}/sessions/{w.queen_sid}/workers/{w.sid}/"
                           f"conversations/parts ({self.c()})"})
        self.status(w, "completed" if success else "failed")

    def colony(self, q: Actor, name: str, task: str):
        path = f"{self.h}/.hive/colonies/{name}"
        if name not in self.home.colony_dirs:
            self.home.colony_dirs.append(name)

        def during(a: Actor):
            a.queen_only("colony_created", {
                "colony_name": name, "colony_path": f"{path} ({self.c()})", "queen_session_id": q.sid,
                "is_new": True, "skill_installed": f"{path}/skills/layout", "skill_name": "layout",
                "skill_replaced": False, "task": f"{task} ({self.c()})", "compaction_status": "skipped"})
            a.queen_only("worker_colony_loaded", {"colony_id": name, "colony_name": name,
                                                  "colony_path": f"{path} ({self.c()})", "worker_count": 0})
        return Tool("create_colony", {"colony_name": name, "task": f"{task} ({self.c()})",
                                      "skill_body": f"Never log customer emails like {self.email} ({self.c()})"},
                    json.dumps({"status": "created", "colony_name": name, "colony_path": path,
                                "queen_session_id": q.sid, "is_new": True}), during=during, wait=(1.5, 3.0))

    def task_tool(self, q: Actor, store: dict, tid: int, subject: str, status: str | None = None) -> Tool:
        tl = f"session:{q.sid}"

        def during(a: Actor):
            now = a.t.isoformat()
            if status is None:
                rec = {"id": tid, "subject": subject, "description": f"{subject} in {self.h}/src ({self.c()})",
                       "active_form": None, "owner": None, "status": "pending", "blocks": [], "blocked_by": [],
                       "metadata": {}, "created_at": now, "updated_at": now}
                store[tid] = rec
                a.emit("task_created", {"task_list_id": tl, "session_id": q.sid, "task": dict(rec)},
                       node_id=None, execution_id=None)
            else:
                rec = store[tid]
                rec["status"], rec["updated_at"] = status, now
                a.emit("task_updated", {"task_list_id": tl, "session_id": q.sid, "task_id": tid,
                                        "fields": ["status"], "task": dict(rec)}, node_id=None, execution_id=None)
        if status is None:
            return Tool("task_create", {"subject": subject}, json.dumps({"success": True, "task_id": tid}),
                        during=during, wait=(0.05, 0.2))
        return Tool("task_update", {"id": tid, "status": status}, json.dumps({"success": True, "task_id": tid}),
                    during=during, wait=(0.05, 0.2))



# ---------------------------------------------------------------------------------------------------------
# The sessions
# ---------------------------------------------------------------------------------------------------------
def alice_ci(x: Ctx):
    q = x.new_queen("A1 CI failure Q&A")
    h, c = x.h, x.c
    x.queen_start(q, f"Why did last night's CI fail on main? Look at {h}/src/payments-api/.github/workflows/ci.yml "
                     f"and draft a note to {x.email} ({c()}).")
    turn(q, HAIKU, stop="tool_use", new=2600, out=310, cache="cold", cost="unreported", steps=[{
        "reasoning": f"Start from the failing job log. {c()}",
        "tools": [Tool("run_command", {"command": f"gh run view --log-failed --repo acme/payments-api ({c()})"},
                       f"error: HTTP 401: Bad credentials (token {GHP}) ({c()})", is_error=True)]}])
    q.emit("stream_ttft_exceeded", {"ttft_seconds": 31.2, "limit_seconds": 30.0}, lo=30, hi=33)
    turn(q, HAIKU, stop="tool_use", new=4100, out=280, steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/src/payments-api/.github/workflows/ci.yml"},
                       f"jobs:\n  test:\n    env:\n      STRIPE_KEY: {SK_PROJ}  # {c()}\n"),
                  Tool("grep_search", {"pattern": "test_refund_rounding", "path": f"{h}/src/payments-api"},
                       f"{h}/src/payments-api/tests/test_refunds.py:88 ({c()})")]}])
    turn(q, HAIKU, stop="tool_use", new=1800, out=220, steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/src/payments-api/tests/test_refunds.py"},
                       f"def test_refund_rounding():\n    assert refund(10.005) == 10.01  # {c()}\n")]}])
    turn(q, GPT, stop="end_turn", new=900, out=640, judge="ACCEPT", steps=[{
        "text": f"CI failed on test_refund_rounding: banker's rounding since the Decimal change. Draft for "
                f"{x.email} below. {c()}"}])
    x.queen_end(q, f"CI root cause explained, email drafted ({c()})", lo=60, hi=240)


def alice_billing(x: Ctx):
    q = x.new_queen("A2 billing refactor")
    h, c, rng = x.h, x.c, x.rng
    tasks: dict = {}
    x.queen_start(q, f"Refactor the billing module in {h}/src/billing: split invoice rendering from tax, keep the "
                     f"public API, run the tests. Staging key {SK_ANT} ({c()}).")
    turn(q, SONNET, stop="tool_use", new=2100, out=388, cache="cold", steps=[{
        "reasoning": f"Three separable steps; track them as tasks first. {c()}",
        "text": f"Plan: split rendering, extract tax, refresh fixtures. {c()}",
        "tools": [x.task_tool(q, tasks, 1, "Split invoice rendering"),
                  x.task_tool(q, tasks, 2, "Extract tax calculation"),
                  x.task_tool(q, tasks, 3, "Refresh invoice fixtures")]}])
    turn(q, SONNET, stop="tool_use", new=5200, out=254, steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/src/billing/core.py"},
                       f"import jinja2\nSMTP_PASSWORD = 'hunter2-{c()}'\n"),
                  Tool("grep_search", {"pattern": "render_invoice", "path": f"{h}/src"},
                       f"{h}/src/web/views/invoices.py:7 ({c()})")]}])
    q.queen_only("queen_phase_changed", {"phase": "incubating", "agent_path": f"{h}/.hive/colonies/billing ({c()})"},
                 lo=20, hi=40)
    q.emit("context_compaction_started", {"usage_pct": 101, "trigger": "pre_turn", "message_count": 61},
           execution_id=None)
    q.emit("context_compacted", {"level": "structural", "usage_before": 101, "usage_after": 58,
                                 "message_inventory": [{"seq": 7, "role": "tool", "content_chars": 48211,
                                                        "tool": "read_file", "preview": f"import jinja2 {c()}"}]},
           execution_id=None, lo=2, hi=5)
    q.prev_context = 41000
    turn(q, SONNET, stop="tool_use", new=1600, out=1220, steps=[{
        "reasoning": f"The spec is settled: fork a colony. {c()}",
        "tools": [x.colony(q, "billing_refactor", "Refactor billing into render.py, tax.py and fixtures")]}])
    q.queen_only("queen_phase_changed", {"phase": "working", "agent_path": f"{h}/.hive/colonies/billing ({c()})"})

    batch = "batch_" + hexid(rng, 10)
    w_tasks = [f"Split invoice rendering out of {h}/src/billing/core.py ({c()})",
               f"Extract VAT code into {h}/src/billing/tax.py ({c()})",
               f"Regenerate invoice fixtures under {h}/src/billing/tests ({c()})"]

    def spawn(a: Actor):
        ends = []
        for i, (fn, task) in enumerate(zip((billing_render, billing_tax, billing_fixtures), w_tasks), 1):
            w = x.new_worker(q, a.t + timedelta(seconds=1.2 + 0.6 * i + rng.random() * 0.2),
                             f"A2/W{i} " + ("render split", "tax extraction", "fixtures")[i - 1], "billing_refactor")
            fn(x, w, task, batch, i)
            ends.append(w.t)
        a.t = max(ends)

    turn(q, SONNET, stop="tool_use", new=900, out=300, steps=[{
        "text": f"Starting three workers in parallel. {c()}",
        "tools": [Tool("run_parallel_workers", {"tasks": [{"task": t} for t in w_tasks], "batch_id": batch},
                       json.dumps({"batch_id": batch, "reports": [{"index": 1, "status": "success"},
                                                                  {"index": 2, "status": "failed"},
                                                                  {"index": 3, "status": "success"}]}),
                       during=spawn, wait=(0.5, 1.0))]}])
    q.queen_only("queen_phase_changed", {"phase": "reviewing", "agent_path": f"{h}/.hive/colonies/billing ({c()})"})
    turn(q, SONNET, stop="tool_use", new=3100, out=520, steps=[{
        "tools": [Tool("run_command", {"command": f"cd {h}/src/billing && pytest -q ({c()})"},
                       f"38 passed, 4 failed: tests/test_tax.py ImportError ({c()})", is_error=True, wait=(8, 14)),
                  x.task_tool(q, tasks, 1, "Split invoice rendering", "completed")]}])
    turn(q, SONNET, stop="end_turn", new=700, out=880, cost="unreported", judge="ACCEPT", steps=[{
        "text": f"Rendering is split out and green; the tax worker hit a circular import, task 2 stays open. {c()}"}])
    x.queen_end(q, f"billing split: render done, tax pending ({c()})", lo=120, hi=300)


def billing_render(x: Ctx, w: Actor, task, batch, idx):
    h, c = x.h, x.c
    x.worker_start(w)
    turn(w, HAIKU, stop="tool_use", new=1800, out=240, cache="cold", credits=0.42, steps=[{
        "text": f"Reading core.py. {c()}",
        "tools": [Tool("read_file", {"path": f"{h}/src/billing/core.py"}, f"def render_invoice(inv):  # {c()}\n")]}])
    turn(w, HAIKU, stop="tool_use", new=2400, out=1850, credits=0.61, steps=[
        {"tools": [Tool("write_file", {"path": f"{h}/src/billing/render.py", "content": f"# {c()}\n"},
                        "Wrote 2,184 bytes"),
                   Tool("edit_file", {"path": f"{h}/src/billing/core.py", "old": "def render_invoice",
                                      "new": f"from .render import render_invoice  # {c()}"}, "Edited 1 hunk")]},
        {"text": f"Running the rendering tests. {c()}",
         "tools": [Tool("run_command", {"command": f"pytest {h}/src/billing/tests/test_render.py"},
                        f"12 passed in 3.41s ({c()})", wait=(3, 5))]}])
    turn(w, HAIKU, stop="end_turn", new=600, out=310, credits=0.18, judge="ACCEPT", steps=[{
        "tools": [Tool("report_to_parent", {"status": "success", "summary": f"render split done ({c()})"},
                       "reported")]}])
    x.worker_end(w, task, batch, idx, 3, success=True, summary=f"render_invoice moved, 12 tests pass ({c()})")


def billing_tax(x: Ctx, w: Actor, task, batch, idx):
    h, c = x.h, x.c
    x.worker_start(w)
    turn(w, SONNET, stop="tool_use", new=2000, out=300, cache="cold", steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/src/billing/core.py"}, f"VAT_RATES = {{'DE': 0.19}}  # {c()}\n")]}])
    turn(w, SONNET, stop="tool_use", new=1500, out=420, steps=[{
        "tools": [Tool("write_file", {"path": f"{h}/src/billing/tax.py", "content": f"from .core import VAT_RATES "
                                                                                    f"# {c()}\n"}, "Wrote 1,022 bytes"),
                  Tool("run_command", {"command": f"python -c 'import billing.tax' # {c()}"},
                       f"ImportError: cannot import name 'VAT_RATES' (circular import) ({c()})", is_error=True)]}])
    turn(w, SONNET, stop="tool_use", new=400, out=120, judge="RETRY", steps=[{
        "tools": [Tool("run_command", {"command": f"python -c 'import billing.tax' # {c()}"},
                       f"ImportError: circular import ({c()})", is_error=True)]}])
    w.emit("node_retry", {"retry_count": 1, "max_retries": 1, "error": f"retry budget exhausted ({c()})"}, lo=5, hi=9)
    x.worker_end(w, task, batch, idx, 3, success=False, summary=f"circular import billing.core <-> tax ({c()})",
                 error=f"ImportError in {h}/src/billing/tax.py ({c()})")


def billing_fixtures(x: Ctx, w: Actor, task, batch, idx):
    h, c = x.h, x.c
    x.worker_start(w)
    turn(w, GPT, stop="tool_use", new=1500, out=260, cache="cold", steps=[{
        "tools": [Tool("list_dir", {"path": f"{h}/src/billing/tests/fixtures"}, f"invoice_001.json ... ({c()})"),
                  Tool("run_command", {"command": f"python {h}/src/billing/tools/regen_fixtures.py"},
                       f"regenerated 14 fixtures ({c()})", wait=(2, 4))]}])
    turn(w, GPT, stop="end_turn", new=700, out=180, cost="unreported", judge="ACCEPT", steps=[{
        "text": f"Fixtures regenerated. {c()}"}])
    x.worker_end(w, task, batch, idx, 3, success=True, summary=f"14 fixtures regenerated ({c()})")


def alice_release_notes(x: Ctx):
    """Ends waiting on the user's answer to a question (client_input_requested is the last durable event)."""
    q = x.new_queen("A3 release notes (waiting for the user)")
    h, c = x.h, x.c
    x.queen_start(q, f"Write the release notes for v2.14 from the merged PRs; the changelog is "
                     f"{h}/src/payments-api/CHANGELOG.md ({c()}).")
    turn(q, SONNET, stop="tool_use", new=3000, out=300, cache="cold", steps=[{
        "tools": [Tool("run_command", {"command": f"gh pr list --state merged --search 'milestone:v2.14' ({c()})"},
                       f"#812 refund rounding, #815 EU VAT, #818 drop py3.8 ({c()})"),
                  Tool("read_file", {"path": f"{h}/src/payments-api/CHANGELOG.md"}, f"## v2.13 ... ({c()})")]}])
    questions = [{"id": "q1", "prompt": f"Mention the Python 3.8 drop as a breaking change? ({c()})",
                  "options": ["Yes, under Breaking", "No, under Maintenance"]}]

    def ask(a: Actor):
        a.emit("client_input_requested", {"questions": questions, "park_reason": "ask_user"})
        loop_state(a, "awaiting_user", park_reason="ask_user", questions=questions)
        x.anchor = a.t

    turn(q, SONNET, stop="tool_use", new=1200, out=420, finished=False, steps=[{
        "text": f"Draft ready; one question before I finalize. {c()}",
        "tools": [Tool("ask_user", {"questions": questions}, "", during=ask, complete=False)]}])
    x.status(q, "waiting")


def bob_sql(x: Ctx):
    q = x.new_queen("B1 SQL review")
    h, c = x.h, x.c
    x.queen_start(q, f"Review the slow query in {h}/work/reports/monthly.sql, prod DSN "
                     f"postgres://report:{rid(x.rng, 12)}@db.internal/prod ({c()}).")
    turn(q, SONNET, stop="tool_use", new=3400, out=290, cache="cold", steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/work/reports/monthly.sql"}, f"SELECT ... FROM orders o ({c()})"),
                  Tool("run_command", {"command": f"psql -c 'EXPLAIN ANALYZE ...' ({c()})"},
                       f"psql: error: connection refused ({c()})", is_error=True)]}])
    turn(q, SONNET, stop="tool_use", new=2200, out=350, steps=[{
        "tools": [Tool("run_command", {"command": f"psql service=reports -c 'EXPLAIN ...' ({c()})"},
                       f"Seq Scan on orders (cost=0.00..48211.00) ({c()})", wait=(2, 6))]}])
    turn(q, SONNET, stop="end_turn", new=800, out=910, judge="ACCEPT", steps=[{
        "text": f"Add an index on orders(created_at, customer_id); the scan drops to 40 ms. {c()}"}])
    x.queen_end(q, f"index suggested ({c()})", lo=60, hi=200)


def bob_etl(x: Ctx):
    """A colony started in the background; its backfill worker goes quiet and never finishes."""
    q = x.new_queen("B2 ETL backfill")
    h, c, rng = x.h, x.c, x.rng
    x.queen_start(q, f"Backfill the events table for October from s3://acme-raw/events using the loader in "
                     f"{h}/work/etl ({c()}).")
    turn(q, SONNET, stop="tool_use", new=2500, out=400, cache="cold", steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/work/etl/loader.py"}, f"def load(day): ...  # {c()}")]}])
    q.queen_only("queen_phase_changed", {"phase": "incubating", "agent_path": f"{h}/.hive/colonies/etl ({c()})"},
                 lo=10, hi=30)
    turn(q, SONNET, stop="tool_use", new=1400, out=900, steps=[{
        "tools": [x.colony(q, "etl_backfill", "Check the schema, then backfill October day by day")]}])
    q.queen_only("queen_phase_changed", {"phase": "working", "agent_path": f"{h}/.hive/colonies/etl ({c()})"})
    batch = "batch_" + hexid(rng, 10)
    w_tasks = [f"Check the October schema of s3://acme-raw/events ({c()})",
               f"Backfill October into the events table with {h}/work/etl/loader.py ({c()})",
               f"Drop the October staging partitions once the backfill is verified ({c()})"]
    workers = []

    def spawn(a: Actor):
        for i, label in enumerate(("B2/W1 schema check", "B2/W2 backfill (stalls)",
                                   "B2/W3 partition cleanup (escalates)"), 1):
            workers.append(x.new_worker(q, a.t + timedelta(seconds=0.9 + 0.5 * i + rng.random() * 0.2), label,
                                        "etl_backfill"))

    turn(q, SONNET, stop="end_turn", new=600, out=260, judge="ACCEPT", steps=[{
        "text": f"Three workers are running in the background; I will report when they finish. {c()}",
        "tools": [Tool("run_parallel_workers", {"tasks": [{"task": t} for t in w_tasks], "batch_id": batch,
                                                "background": True},
                       json.dumps({"batch_id": batch, "status": "started", "workers": 3}), during=spawn,
                       wait=(0.3, 0.8))]}])
    x.queen_end(q, f"colony etl_backfill started ({c()})", lo=3, hi=8)

    w1, w2, w3 = workers
    x.worker_start(w1)
    turn(w1, HAIKU, stop="tool_use", new=1600, out=200, cache="cold", steps=[{
        "tools": [Tool("run_command", {"command": f"aws s3 ls s3://acme-raw/events/2026/10/ ({c()})"},
                       f"31 prefixes ({c()})", wait=(1, 3))]}])
    turn(w1, HAIKU, stop="end_turn", new=900, out=350, judge="ACCEPT", steps=[{
        "tools": [Tool("report_to_parent", {"status": "success", "summary": f"schema stable ({c()})"}, "reported")]}])
    x.worker_end(w1, w_tasks[0], batch, 1, 3, success=True, summary=f"schema unchanged for all 31 days ({c()})")

    # W3 asks its queen before a destructive step and waits for the answer: needs_attention until someone looks
    x.worker_start(w3)
    turn(w3, HAIKU, stop="tool_use", new=1500, out=220, cache="cold", steps=[{
        "tools": [Tool("run_command", {"command": f"psql \"$PROD_DSN\" -c '\\d+ events_staging' ({c()})"},
                       f"4 partitions, 2.1 GB ({c()})", wait=(1, 3))]}])
    w3.emit("escalation_requested", {"request_id": "esc_" + hexid(rng, 10),
                                     "reason": f"Dropping partitions in prod needs a person's approval ({c()})",
                                     "context": f"events_staging_2026_10_* on {h}/work/etl ({c()})"})
    x.status(w3, "needs_attention")

    x.worker_start(w2)
    turn(w2, SONNET, stop="tool_use", new=2200, out=330, cache="cold", steps=[{
        "tools": [Tool("run_command", {"command": f"python {h}/work/etl/loader.py --day 2026-10-01 ({c()})"},
                       f"loaded 1,204,118 rows ({c()})", wait=(20, 40))]}])
    turn(w2, SONNET, stop="tool_use", new=900, out=210, steps=[{
        "tools": [Tool("run_command", {"command": f"python {h}/work/etl/loader.py --day 2026-10-02 ({c()})"},
                       f"Timeout: s3 read stalled after 90s ({c()})", is_error=True, wait=(90, 95))]}])
    turn(w2, SONNET, stop="tool_use", new=700, out=180, steps=[{
        "text": f"Retrying day 2 with a smaller chunk size. {c()}",
        "tools": [Tool("run_command", {"command": f"python {h}/work/etl/loader.py --day 2026-10-02 --chunk 1000"},
                       f"loaded 1,187,002 rows ({c()})", wait=(25, 45))]}])
    w2.emit("stream_inactive", {"idle_seconds": 62.4, "limit_seconds": 60.0}, lo=62, hi=64)
    w2.emit("stream_nudge_sent", {"reason": "stream_inactive", "nudge_count": 1})
    w2.emit("reminder_injected", {"source": "stream_stall", "detail": f"inactive 62s ({c()})", "meta": {}})
    w2.emit("node_stalled", {"reason": "No output for 180s after the nudge"}, lo=115, hi=125)
    x.anchor = w2.t
    x.status(w2, "stalled")


def bob_flaky(x: Ctx):
    """Still working, but its test runs keep failing: three tool errors among its last units of work."""
    q = x.new_queen("B4 flaky integration suite (degraded)")
    h, c = x.h, x.c
    x.queen_start(q, f"The integration suite in {h}/work/api fails on and off; find out why ({c()}).")
    turn(q, SONNET, stop="tool_use", new=2600, out=280, cache="cold", steps=[{
        "tools": [Tool("run_command", {"command": f"pytest {h}/work/api/tests/integration -x ({c()})"},
                       f"FAILED test_orders_sync: ConnectionResetError ({c()})", is_error=True, wait=(20, 40))]}])
    turn(q, SONNET, stop="tool_use", new=1100, out=240, steps=[{
        "text": f"Looks like a race with the fixture server; running it again. {c()}",
        "tools": [Tool("run_command", {"command": f"pytest {h}/work/api/tests/integration -x"},
                       f"FAILED test_refund_webhook: timeout after 30s ({c()})", is_error=True, wait=(30, 35))]}])
    turn(q, SONNET, stop="tool_use", new=900, out=300, steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/work/api/tests/conftest.py"},
                       f"@pytest.fixture(scope='session') ({c()})"),
                  Tool("run_command", {"command": f"pytest {h}/work/api/tests/integration -x -p no:randomly"},
                       f"FAILED test_orders_sync: ConnectionResetError ({c()})", is_error=True, wait=(20, 40))]}])
    turn(q, HAIKU, stop="tool_use", new=700, out=260, steps=[{
        "text": f"Three failures, all around the shared fixture server; trying isolated ports. {c()}",
        "tools": [Tool("edit_file", {"path": f"{h}/work/api/tests/conftest.py", "old": "port=8000",
                                     "new": f"port=0  # {c()}"}, "Edited 1 hunk")]}])
    x.anchor = q.t
    x.status(q, "degraded")


def bob_deps(x: Ctx):
    q = x.new_queen("B3 dependency upgrade")
    h, c = x.h, x.c
    x.queen_start(q, f"Upgrade requests and urllib3 in {h}/work/etl and make sure the tests pass ({c()}).")
    turn(q, HAIKU, stop="tool_use", new=2000, out=260, cache="cold", steps=[{
        "tools": [Tool("run_command", {"command": f"pip install -U requests urllib3 ({c()})"},
                       f"Successfully installed requests-2.33.1 urllib3-2.4.0 ({c()})", wait=(4, 9))]}])
    turn(q, GPT, stop="tool_use", new=1200, out=240, cost="unreported", steps=[{
        "tools": [Tool("run_command", {"command": f"pytest {h}/work/etl -q"},
                       f"2 failed: test_retry_adapter ({c()})", is_error=True, wait=(6, 12))]}])
    turn(q, GPT, stop="tool_use", new=900, out=520, cost="unreported", steps=[{
        "tools": [Tool("edit_file", {"path": f"{h}/work/etl/http.py", "old": "method_whitelist",
                                     "new": f"allowed_methods  # {c()}"}, "Edited 1 hunk"),
                  Tool("run_command", {"command": f"pytest {h}/work/etl -q"}, f"64 passed ({c()})", wait=(6, 12))]}])
    turn(q, HAIKU, stop="end_turn", new=500, out=300, judge="ACCEPT", steps=[{
        "text": f"Upgraded; one rename (method_whitelist -> allowed_methods). {c()}"}])
    x.queen_end(q, f"deps upgraded ({c()})", lo=30, hi=90)


def carol_research(x: Ctx):
    q = x.new_queen("C1 market research")
    c = x.c
    x.queen_start(q, f"Summarize what competitors charge for usage-based AI telemetry; my notes are in "
                     f"{x.h}/Documents/pricing.md ({c()}).")
    for i in range(3):
        turn(q, GPT, stop="tool_use", new=1800 + 300 * i, out=220, cache="cold" if i == 0 else "warm",
             cost="unreported" if i != 1 else "reported", steps=[{
                 "tools": [Tool("web_search", {"query": f"usage based pricing telemetry vendor {i} ({c()})"},
                                f"1. ... 2. ... ({c()})", wait=(1, 3)),
                           Tool("web_fetch", {"url": f"https://example.org/pricing/{i}"},
                                f"<html>pricing page {c()}</html>", is_error=(i == 2), wait=(1, 4))]}])
    turn(q, GPT, stop="end_turn", new=1100, out=1400, judge="ACCEPT", steps=[{
        "text": f"Three vendors charge per event; one per seat. Table below. {c()}"}])
    x.queen_end(q, f"pricing summary delivered ({c()})", lo=60, hi=180)


def carol_docs(x: Ctx):
    q = x.new_queen("C2 docs refresh")
    h, c, rng = x.h, x.c, x.rng
    tasks: dict = {}
    x.queen_start(q, f"Refresh the API docs in {h}/src/portal/docs for the v3 endpoints ({c()}).")
    turn(q, SONNET, stop="tool_use", new=2800, out=350, cache="cold", steps=[{
        "tools": [x.task_tool(q, tasks, 1, "Update endpoint reference"),
                  x.task_tool(q, tasks, 2, "Update code samples")]}])
    q.queen_only("queen_phase_changed", {"phase": "incubating", "agent_path": f"{h}/.hive/colonies/docs ({c()})"},
                 lo=10, hi=20)
    turn(q, SONNET, stop="tool_use", new=1200, out=700, steps=[{
        "tools": [x.colony(q, "docs_refresh", "Update the v3 reference and samples")]}])
    q.queen_only("queen_phase_changed", {"phase": "working", "agent_path": f"{h}/.hive/colonies/docs ({c()})"})
    batch = "batch_" + hexid(rng, 10)
    w_tasks = [f"Update the endpoint reference in {h}/src/portal/docs/api ({c()})",
               f"Update the code samples in {h}/src/portal/docs/samples ({c()})"]

    def spawn(a: Actor):
        ends = []
        w1 = x.new_worker(q, a.t + timedelta(seconds=1.1 + rng.random() * 0.2), "C2/W1 reference", "docs_refresh")
        x.worker_start(w1)
        for k in range(3):
            turn(w1, SONNET, stop="tool_use" if k < 2 else "end_turn", new=2600, out=900, cache="cold" if k == 0
                 else "warm", judge="ACCEPT" if k == 2 else "CONTINUE", steps=[{
                     "tools": [Tool("edit_file", {"path": f"{h}/src/portal/docs/api/v3_{k}.md",
                                                  "content": f"## v3 ({c()})"}, "Edited 3 hunks")]}])
        x.worker_end(w1, w_tasks[0], batch, 1, 2, success=True, summary=f"reference updated ({c()})")
        ends.append(w1.t)
        w2 = x.new_worker(q, a.t + timedelta(seconds=1.7 + rng.random() * 0.2), "C2/W2 samples", "docs_refresh")
        x.worker_start(w2)
        turn(w2, HAIKU, stop="tool_use", new=1900, out=700, cache="cold", steps=[{
            "tools": [Tool("run_command", {"command": f"make -C {h}/src/portal/docs samples"},
                           f"sample 4 failed: 404 ({c()})", is_error=True, wait=(3, 6))]}])
        turn(w2, HAIKU, stop="end_turn", new=800, out=500, judge="ACCEPT", steps=[{
            "tools": [Tool("run_command", {"command": f"make -C {h}/src/portal/docs samples"},
                           f"12 samples ok ({c()})", wait=(3, 6))]}])
        x.worker_end(w2, w_tasks[1], batch, 2, 2, success=True, summary=f"samples updated ({c()})")
        ends.append(w2.t)
        a.t = max(ends)

    turn(q, SONNET, stop="tool_use", new=800, out=240, steps=[{
        "tools": [Tool("run_parallel_workers", {"tasks": [{"task": t} for t in w_tasks], "batch_id": batch},
                       json.dumps({"batch_id": batch, "reports": [{"index": 1, "status": "success"},
                                                                  {"index": 2, "status": "success"}]}),
                       during=spawn, wait=(0.5, 1.0))]}])
    q.queen_only("queen_phase_changed", {"phase": "reviewing", "agent_path": f"{h}/.hive/colonies/docs ({c()})"})
    turn(q, SONNET, stop="end_turn", new=1500, out=600, judge="ACCEPT", steps=[{
        "tools": [x.task_tool(q, tasks, 1, "Update endpoint reference", "completed"),
                  x.task_tool(q, tasks, 2, "Update code samples", "completed")]}])
    x.queen_end(q, f"docs refreshed ({c()})", lo=60, hi=200)


def carol_onboarding(x: Ctx):
    """Still working: its last LLM turn ends at the end of the day (a minute before "now")."""
    q = x.new_queen("C3 onboarding checklist (active)")
    h, c = x.h, x.c
    x.queen_start(q, f"Build an onboarding checklist for the new hire from {h}/Documents/onboarding/ ({c()}).")
    turn(q, SONNET, stop="tool_use", new=2400, out=300, cache="cold", steps=[{
        "tools": [Tool("list_dir", {"path": f"{h}/Documents/onboarding"}, f"laptop.md accounts.md ({c()})"),
                  Tool("read_file", {"path": f"{h}/Documents/onboarding/accounts.md"},
                       f"Okta, GitHub ({GHP}), AWS ({c()})")]}])
    turn(q, HAIKU, stop="tool_use", new=1300, out=450, steps=[{
        "text": f"Drafting the checklist. {c()}",
        "tools": [Tool("write_file", {"path": f"{h}/Documents/onboarding/checklist.md", "content": f"- [ ] {c()}"},
                       "Wrote 1,940 bytes")]}])
    turn(q, SONNET, stop="tool_use", new=900, out=380, steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/Documents/onboarding/laptop.md"}, f"MDM enrolment ({c()})")]}])
    x.anchor = q.t
    x.status(q, "active")


def carol_digest(x: Ctx):
    """`hive run digest_agent`, whose process dies in the middle of a tool call: no end event follows, and its
    state.json still says active with the dead process's pid — crashed, not merely quiet."""
    a = x.new_agent_run("C4 weekly digest (runtime crashed)", "digest_agent")
    h, c = x.h, x.c
    a.run = "run_" + hexid(x.rng, 12)
    a.emit("execution_started", {"input": {"topic": f"support escalations of week 47 ({c()})"}}, node_id=None,
           run_id=a.run)
    a.emit("node_loop_started", {"max_iterations": 40})
    turn(a, HAIKU, stop="tool_use", new=1800, out=240, cache="cold", steps=[{
        "tools": [Tool("read_file", {"path": f"{h}/digest/sources.yaml"}, f"zendesk, linear ({c()})")]}])
    turn(a, SONNET, stop="tool_use", new=2100, out=380, steps=[{
        "tools": [Tool("web_fetch", {"url": "https://support.example.org/api/tickets?week=47"},
                       f"[38 tickets] ({c()})", wait=(2, 5))]}])
    turn(a, SONNET, stop="tool_use", new=900, out=200, finished=False, steps=[{
        "tools": [Tool("run_command", {"command": f"python {h}/digest/render.py --week 47 ({c()})"}, "",
                       complete=False)]}])
    x.anchor = a.t
    x.state_file(a, "digest_agent")
    x.status(a, "crashed")


# (user, profile, debug log?) and each user's sessions: (script, placement)
# placement: ("at", fraction of the day) or ("anchor", seconds before the end of the day for ctx.anchor)
TEAM = {
    "alice": ("default", True, [(alice_ci, ("at", 0.03)), (alice_billing, ("at", 0.30)),
                                (alice_release_notes, ("anchor", 240))]),
    "bob": ("default", False, [(bob_sql, ("at", 0.08)), (bob_deps, ("at", 0.55)), (bob_etl, ("anchor", 360)),
                               (bob_flaky, ("anchor", 20))]),
    "carol": ("scout", False, [(carol_research, ("at", 0.12)), (carol_docs, ("at", 0.45)),
                               (carol_onboarding, ("anchor", 5)), (carol_digest, ("anchor", 150))]),
}
EXTRA_PROFILES = ["default", "scout", "analyst"]


def run_script(fn, home: Home, rng_seed: str, start: datetime, profile: str) -> Ctx:
    x = Ctx(home, random.Random(rng_seed), start, profile)
    fn(x)
    return x


def build(out: Path, users: list[str], seed: int, end: datetime) -> tuple[list[Home], dict]:
    midnight = end.replace(hour=0, minute=0, second=0, microsecond=0)
    available = (end - midnight).total_seconds()
    span = min(NOMINAL_DAY_HOURS * 3600, max(3600.0, available - 600))
    day_start = end - timedelta(seconds=span)
    homes = []
    for u_index, user in enumerate(users):
        if user in TEAM:
            profile, debug, scripts = TEAM[user]
        else:  # extra users get a copy of someone's day
            base = list(TEAM)[u_index % len(TEAM)]
            profile, debug, scripts = EXTRA_PROFILES[u_index % 3], False, TEAM[base][2]
        home = Home(user, out / user, debug)
        if debug:
            home.add(day_start, home.global_bus, "tool_catalog_refreshed",
                     "global", None, None, {"servers": ["files", "shell", "github"], "tool_count": 41,
                                            "added": [], "removed": []})
        for n, (fn, (how, value)) in enumerate(scripts):
            rng_seed = f"{seed}/{user}/{n}/{fn.__name__}"
            if how == "at":
                start = day_start + timedelta(seconds=span * value)
            else:
                probe = run_script(fn, Home(user, out / user, False), rng_seed, day_start, profile)
                if probe.anchor is None:
                    raise SystemExit(f"internal error: {fn.__name__} set no anchor")
                start = end - timedelta(seconds=value) - (probe.anchor - day_start)
            run_script(fn, home, rng_seed, start, profile)
        if any(e.ts > end for e in home.emissions):
            raise SystemExit(f"internal error: {user}'s day runs past --end")
        home.publish_all()
        homes.append(home)
    return homes, {"day_start": day_start, "end": end}


# ---------------------------------------------------------------------------------------------------------
# Expected totals
# ---------------------------------------------------------------------------------------------------------
USAGE_KEYS = ["input_tokens", "output_tokens", "cached_tokens", "cache_creation_tokens", "cost_nanos",
              "llm_calls", "unpriced_turns", "tool_calls", "tool_errors"]


def zero():
    return {k: 0 for k in USAGE_KEYS} | {"events": 0}


def add_usage(m: dict, em: Emission):
    d = em.data
    if em.type == "llm_turn_complete":
        for k in ("input_tokens", "output_tokens", "cached_tokens", "cache_creation_tokens"):
            m[k] += int(d.get(k, 0))
        cost = Decimal(repr(float(d.get("cost_usd", 0.0))))
        m["cost_nanos"] += int((cost * Decimal(1_000_000_000)).to_integral_value())
        m["llm_calls"] += 1
        if cost == 0 and d.get("input_tokens", 0) + d.get("output_tokens", 0) > 0:
            m["unpriced_turns"] += 1
    elif em.type == "tool_call_completed":
        m["tool_calls"] += 1
        m["tool_errors"] += 1 if d.get("is_error") else 0
    m["events"] += 1


def add_counts(m: dict, u: dict):
    for k in USAGE_KEYS + ["events"]:
        m[k] += u[k]


def finish(m: dict) -> dict:
    out = dict(m)
    out["cost_usd"] = float(Decimal(m["cost_nanos"]) / Decimal(1_000_000_000))
    return out


TASK_STATES = ("pending", "in_progress", "completed")


def work_of(home: Home) -> tuple[dict, dict]:
    """What the status API shows of each session's work, folded from the durable events the way Apiary's
    shared model does (apiary_schema::work): task counts by state, the tool call in flight (started after
    the session's last end and not completed: the latest one, and how many), and per-tool durations paired
    by tool_use_id on the device (completion time - start time, floored to whole milliseconds)."""
    sessions: dict = defaultdict(lambda: {"tasks": {}, "calls": {}, "ended": None})
    tools: dict = {}
    for em in sorted(home.emissions, key=lambda e: (e.ts, e.order)):
        if em.type not in DURABLE_TYPES:
            continue
        w, d = sessions[em.session], em.data
        if em.type in ("task_created", "task_updated"):
            task = d.get("task") or {}
            w["tasks"][str(task.get("id", d.get("task_id")))] = task.get("status")
        elif em.type == "tool_call_started":
            w["calls"][d["tool_use_id"]] = {"name": d["tool_name"], "started": em.ts, "completed": None}
        elif em.type == "tool_call_completed":
            call = w["calls"].setdefault(d["tool_use_id"], {"name": d["tool_name"], "started": None})
            call["completed"] = em.ts
            t = tools.setdefault(d["tool_name"], {"tool_calls": 0, "tool_errors": 0, "tool_calls_timed": 0,
                                                  "tool_duration_ms": 0})
            t["tool_calls"] += 1
            t["tool_errors"] += 1 if d.get("is_error") else 0
            if call["started"] is not None and call["started"] <= em.ts:
                t["tool_calls_timed"] += 1
                t["tool_duration_ms"] += (em.ts - call["started"]) // timedelta(milliseconds=1)
        elif em.type in ("execution_completed", "execution_failed"):
            w["ended"] = em.ts
    out = {}
    for sid, w in sessions.items():
        counts = {s: 0 for s in TASK_STATES} | {"other": 0}
        for state in w["tasks"].values():
            counts[state if state in TASK_STATES else "other"] += 1
        flying = [c for c in w["calls"].values() if c["completed"] is None and c["started"] is not None
                  and (w["ended"] is None or c["started"] > w["ended"])]
        latest = max(flying, key=lambda c: c["started"]) if flying else None
        out[sid] = {"tasks": counts,
                    "activity": {"tool_name": latest["name"], "in_flight": len(flying)} if latest else None}
    return out, tools


def add_tools(into: dict, tools: dict):
    for name, t in tools.items():
        acc = into.setdefault(name, {k: 0 for k in t})
        for k, v in t.items():
            acc[k] += v


def expected(homes: list[Home], window: dict, seed: int, claude: list | None = None,
             claude_files: dict | None = None) -> dict:
    by_user, by_model, by_colony, by_session = (defaultdict(zero) for _ in range(4))
    total = zero()
    sessions = {}
    by_tool: dict = {}
    work: dict = {}
    types = defaultdict(int)
    for home in homes:
        for em in home.emissions:
            if em.type not in DURABLE_TYPES:
                continue
            types[em.type] += 1
            for m in (by_user[home.user], by_session[em.session], total):
                add_usage(m, em)
            if em.type == "llm_turn_complete":
                add_usage(by_model[em.data["model"]], em)
            if em.type in ("llm_turn_complete", "tool_call_completed"):
                add_usage(by_colony[em.colony_id or ""], em)
        for sid, meta in home.sessions.items():
            sessions[sid] = dict(meta, runtime="hive")
        w, tools = work_of(home)
        work.update(w)
        add_tools(by_tool, tools)
    claude = claude or []
    for cs in claude:  # Claude Code: top-level sessions, no colony; usage computed by claude_code.py
        for m in (by_user[cs.user], by_session[cs.sid], total, by_colony[""]):
            add_counts(m, cs.usage)
        for model, u in cs.by_model.items():
            add_counts(by_model[model], u)
        for r in cs.records:
            if r.name in claude_code.DURABLE:
                types[f"claude_code.{r.name}"] += 1
        sessions[cs.sid] = {"user": cs.user, "role": "queen", "parent": None, "colony": None, "label": cs.label,
                            "status": cs.status, "runtime": "claude_code"}
        add_tools(by_tool, cs.tools)
    no_work = {"tasks": {s: 0 for s in TASK_STATES} | {"other": 0}, "activity": None}
    for sid, meta in sessions.items():
        meta["usage"] = finish(by_session[sid])
        meta.update(work.get(sid, no_work))
        if meta["status"] in ("active", "degraded"):
            # what the session reads once quiet for longer than the ingest's stall_after (the demo took long):
            # a queen in her independent phase is idle, and so is a quiet Claude Code session (interactive)
            meta["quiet_status"] = "idle"
    colonies = {}
    for sid, meta in sessions.items():
        if meta["role"] == "worker":
            col = colonies.setdefault(meta["colony"], {"colony_name": meta["colony_name"], "user": meta["user"],
                                                       "workers": []})
            col["workers"].append(sid)
    for cid, col in colonies.items():
        col["usage"] = finish(by_colony[cid])
    by_runtime = defaultdict(zero)
    for sid, meta in sessions.items():
        add_counts(by_runtime[meta["runtime"]], by_session[sid])
    strip_events = lambda m: {k: v for k, v in finish(m).items() if k != "events"}  # noqa: E731
    return {
        "generator": "deploy/local/workload.py",
        "seed": seed,
        "window": {"start_local": window["day_start"].isoformat(), "end_local": window["end"].isoformat()},
        "notes": [
            "Usage counts durable events once each (both logs hold the same events); cached_tokens and "
            "cache_creation_tokens are included in input_tokens; unpriced_turns = turns with cost_usd 0.0 and tokens.",
            "by_colony: key = colony_id = the queen session that forked the colony; only worker events carry it. "
            "Queen-level usage has no colony (key \"\").",
            "events = durable events (informational: the cloud also stores agent heartbeats and drop reports).",
            "status 'active' (and 'degraded': progress, with 3 tool errors among the last 20 units of work) holds "
            "while the session made progress within the ingest's stall_after (5 min); after that a quiet queen in "
            "phase 'independent' reads 'idle' (quiet_status). 'needs_attention': a worker's escalation_requested "
            "stands until someone answers. 'crashed': an agent run whose state.json names a process that is gone.",
            "sessions[].tasks: task counts by state; sessions[].activity: the tool call in flight (latest started "
            "after the session's last end, never completed) and how many; by_tool: tool calls by tool name, "
            "durations paired on the device by tool_use_id (Hive: completion - start, floored to ms; Claude Code: "
            "its own duration_ms).",
            "Claude Code (runtime claude_code): input_tokens = its input_tokens + cache_read_tokens + "
            "cache_creation_tokens; cost = its cost_usd rounded to nano-USD; llm_calls = api_request records, "
            "tool_calls = tool_result records, tool_errors = those with success false; events = api_request + "
            "tool_result + api_error (the other records are filtered). Its sessions have no colony and never "
            "report an end: quiet for longer than stall_after, they wait for their user and read 'idle' (quiet_interactive).",
        ],
        "totals": finish(total),
        "by_user": {u: finish(m) for u, m in sorted(by_user.items())},
        "by_model": {k: strip_events(m) for k, m in sorted(by_model.items())},
        "by_colony": {k: strip_events(m) for k, m in sorted(by_colony.items())},
        "by_runtime": {k: finish(m) for k, m in sorted(by_runtime.items())},
        "by_tool": dict(sorted(by_tool.items())),
        "colonies": colonies,
        "sessions": dict(sorted(sessions.items(), key=lambda kv: (kv[1]["user"], kv[1]["label"]))),
        "statuses": {s: sum(1 for m in sessions.values() if m["status"] == s)
                     for s in sorted({m["status"] for m in sessions.values()})},
        "durable_events_by_type": dict(sorted(types.items())),
        "files": {h.user: sorted({str(p.relative_to(h.root)) for _, p, _ in h.writes}) for h in homes},
        "claude_code": {
            "generator": "deploy/local/claude_code.py",
            "exports": claude_files or {},
            "sessions": [cs.sid for cs in claude],
            "records": sum(len(cs.records) for cs in claude),
            "durable_records": sum(1 for cs in claude for r in cs.records if r.name in claude_code.DURABLE),
        },
        "privacy": {"canary": CANARY, "canaries_planted": sum(h.canaries for h in homes) +
                    sum(cs.canaries for cs in claude),
                    "leak_patterns": LEAK_PATTERNS + claude_code.leak_patterns(claude)},
    }


# ---------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------
def write_all(writes: list[tuple[Path, str]]):
    per_file: dict[Path, list[str]] = defaultdict(list)
    for path, line in writes:
        per_file[path].append(line)
    for path, lines in per_file.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))


def trickle(writes: list[tuple[Path, str]], seconds: float, rng: random.Random, log):
    """Appends line by line, flushing each, over `seconds`; every 7th line is written in two pieces."""
    if not writes:
        return
    pause = seconds / len(writes)
    handles: dict[Path, object] = {}
    try:
        for n, (path, line) in enumerate(writes):
            f = handles.get(path)
            if f is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                f = handles[path] = open(path, "a", encoding="utf-8")
            if n % 7 == 3 and len(line) > 20:
                cut = rng.randrange(10, len(line) - 5)
                f.write(line[:cut])
                f.flush()
                time.sleep(min(0.05, pause / 2))
                f.write(line[cut:] + "\n")
            else:
                f.write(line + "\n")
            f.flush()
            if n % 50 == 0:
                log(f"trickle: {n}/{len(writes)} lines")
            time.sleep(pause)
    finally:
        for f in handles.values():
            f.close()


def write_state(path: Path, state: dict, pid: int | None):
    """Writes a state.json the way Hive does (a temporary file renamed over it)."""
    state = dict(state)
    if pid is not None:
        state["pid"] = pid
    else:  # what Hive leaves once a restarted runtime found the run's process dead
        state.update(status="cancelled", pid=48211, error="Stale session: runtime restarted")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".state.json.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="directory for <user>/ homes and expected.json")
    ap.add_argument("--users", default="alice,bob,carol", help="comma-separated user names (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--end", help="end of the day, naive local ISO time (default: one minute ago)")
    ap.add_argument("--trickle", type=float, default=0.0, metavar="SECONDS",
                    help="write the last part of the day live, line by line, over SECONDS")
    ap.add_argument("--trickle-share", type=float, default=0.25, metavar="FRACTION",
                    help="share of the lines written live with --trickle (default: %(default)s)")
    ap.add_argument("--claude-code", default=",".join(claude_code.DEFAULT_USERS), metavar="USERS",
                    help="users who also run Claude Code: its OTLP exports under OUT/claude_code/ "
                         "(default: %(default)s; '' for none)")
    ap.add_argument("--runtime-pid", type=int, metavar="PID",
                    help="the pid a crashing agent run's state.json names (the demo starts a process and kills it); "
                         "without it, the state.json is left the way a restarted Hive marks a dead run: cancelled, "
                         "'Stale session: runtime restarted'")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    def log(msg):
        if not args.quiet:
            print(f"workload: {msg}", file=sys.stderr, flush=True)

    users = [u.strip() for u in args.users.split(",") if u.strip()]
    if not users or len(set(users)) != len(users):
        ap.error("--users must list distinct names")
    for u in users:
        if not u.replace("-", "").replace("_", "").isalnum():
            ap.error(f"bad user name {u!r}")
    if args.end:
        end = datetime.fromisoformat(args.end)
        if end.tzinfo is not None:
            ap.error("--end is naive local time (no zone), as Hive writes it")
    else:
        end = (datetime.now() - timedelta(seconds=60)).replace(microsecond=0)
    out = args.out
    for u in users:
        if (out / u).exists():
            shutil.rmtree(out / u)
    out.mkdir(parents=True, exist_ok=True)

    homes, window = build(out, users, args.seed, end)
    cc_users = [u for u in users if u in {v.strip() for v in args.claude_code.split(",")}]
    claude = claude_code.build(cc_users, args.seed, window["day_start"], end)
    if (out / "claude_code").exists():
        shutil.rmtree(out / "claude_code")
    claude_files = claude_code.write_exports(claude, out / "claude_code")
    exp = expected(homes, window, args.seed, claude, claude_files)
    tmp = out / "expected.json.tmp"
    tmp.write_text(json.dumps(exp, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / "expected.json")

    # Every write of every home, in the order the team's Hive processes make them (per file: file order).
    ordered = sorted(((ts, u, i, path, line) for u, home in enumerate(homes)
                      for i, (ts, path, line) in enumerate(home.writes)), key=lambda w: w[:3])
    ordered = [(path, line) for _, _, _, path, line in ordered]
    if args.trickle > 0:
        n_live = max(1, int(len(ordered) * args.trickle_share))
        write_all(ordered[:-n_live])
        log(f"wrote {len(ordered) - n_live} lines at once; writing {n_live} more live over {args.trickle:g}s")
        trickle(ordered[-n_live:], args.trickle, random.Random(args.seed), log)
    else:
        write_all(ordered)
    for home in homes:
        for path, state in home.state_files:
            write_state(path, state, args.runtime_pid)
        for name in home.colony_dirs:  # a colony's own directory, which Hive names after it
            (home.root / "colonies" / name).mkdir(parents=True, exist_ok=True)
    t = exp["totals"]
    hive = [s for s in exp["sessions"].values() if s["runtime"] == "hive"]
    log(f"{len(users)} users, {len(hive)} Hive sessions ({sum(1 for s in hive if s['role'] == 'queen')} queens), "
        f"{sum(len(f) for f in exp['files'].values())} log files, {len(ordered)} lines; "
        f"window {exp['window']['start_local']} .. {exp['window']['end_local']}")
    if claude:
        log(claude_code.summary(claude) + f"; {sum(len(f) for f in claude_files.values())} OTLP exports in "
            f"{out / 'claude_code'} (not sent yet)")
    log(f"together: {t['llm_calls']} LLM calls, {t['tool_calls']} tool calls, ${t['cost_usd']:.4f}; "
        f"expected totals in {out / 'expected.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
