#!/usr/bin/env python3
"""Small helpers for deploy/local/demo.sh (python3, stdlib only).

    demo_util.py free-port                       print a free TCP port on 127.0.0.1
    demo_util.py db-url URL NAME                 print URL with its database replaced by NAME
    demo_util.py wait-http URL [--pid P] [--log F] [--timeout S]
                                                 wait until GET URL answers 2xx (fail early if P dies)
    demo_util.py wait-agent DIR [--pid P] [--log F] [--timeout S]
                                                 wait until the agent of data dir DIR answers GET /v1/status
    demo_util.py wait-drained --expected F --timeout S USER=DIR[:PID] ...
                                                 wait until every agent has read its Hive logs and
                                                 delivered everything (nothing pending)
    demo_util.py wait-status --url URL --token-file F --expected F --status S [--timeout S]
                                                 wait until the sessions expected.json gives status S
                                                 read S on the ingest (e.g. crashed: the runtime's death
                                                 reaches the cloud with the agents' next heartbeat)
    demo_util.py receiver --port-file F --out F --secret S
                                                 a local webhook receiver: records every POST (its JSON
                                                 body, and whether its X-Apiary-Signature verifies with
                                                 S) as a line of --out, answers 200; writes its port
    demo_util.py budget-limit --url URL --token-file F --share P
                                                 print a USD limit of which this month's spend (UTC) is
                                                 P percent, as a decimal with 9 places
    demo_util.py wait-webhook --file F [--count N] [--timeout S]
                                                 wait until the receiver recorded N notifications; print
                                                 each (event, summary, signature verified)
    demo_util.py label-colonies --url URL --admin-token-file F USER=AGENT_DIR ...
                                                 plays the users telling their admin which colony key is
                                                 which: reads each agent's colonies with their keys
                                                 (GET /v1/colonies on the agent, as its settings page
                                                 lists them) and labels each key the ingest knows
                                                 (PUT /v1/colonies/{key}/label, "Billing refactor" for
                                                 billing_refactor); prints key -> label
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import http.server
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path


def say(msg: str):
    print(msg, file=sys.stderr, flush=True)


def alive(pid: int | None) -> bool:
    if not pid:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by the shell) is not alive
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def log_tail(path: str | None, n=15) -> str:
    if not path:
        return ""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return ""
    return "\n".join("    | " + line for line in lines)


def get_json(url: str, token: str | None = None, timeout=2.0):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
        return r.status, json.loads(r.read() or b"null")


def cmd_free_port(_):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


def cmd_db_url(a):
    u = urllib.parse.urlsplit(a.url)
    print(urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + a.name, u.query, u.fragment)))


def cmd_wait_http(a):
    deadline = time.monotonic() + a.timeout
    last = ""
    while time.monotonic() < deadline:
        if not alive(a.pid):
            say(f"error: the process (pid {a.pid}) exited while waiting for {a.url}; last log lines:\n"
                f"{log_tail(a.log)}")
            return 1
        try:
            code, _ = get_json(a.url)
            if 200 <= code < 300:
                return 0
        except (urllib.error.URLError, OSError, ValueError) as e:
            last = str(e)
        time.sleep(0.2)
    say(f"error: {a.url} did not answer within {a.timeout:g}s ({last}); last log lines:\n{log_tail(a.log)}")
    return 1


def agent_get(data_dir: Path, path: str):
    """GET `path` of the agent of `data_dir` (its address and intake token from the directory)."""
    addr = (data_dir / "agent.addr").read_text().strip()
    token = (data_dir / "agent.token").read_text().strip()
    _, v = get_json(f"http://{addr}{path}", token)
    return addr, v


def agent_status(data_dir: Path):
    return agent_get(data_dir, "/v1/status")


def cmd_wait_agent(a):
    d = Path(a.dir)
    deadline = time.monotonic() + a.timeout
    last = ""
    while time.monotonic() < deadline:
        if not alive(a.pid):
            say(f"error: apiary-agent (pid {a.pid}) exited; last log lines:\n{log_tail(a.log)}")
            return 1
        try:
            addr, _ = agent_status(d)
            print(addr)
            return 0
        except (OSError, ValueError, urllib.error.URLError) as e:
            last = str(e)
        time.sleep(0.2)
    say(f"error: the agent in {d} did not answer GET /v1/status within {a.timeout:g}s ({last}); last log lines:\n"
        f"{log_tail(a.log)}")
    return 1


def n(v, *path):
    for p in path:
        v = (v or {}).get(p) if isinstance(v, dict) else None
    return v if isinstance(v, (int, float)) else 0


def cmd_wait_drained(a):
    exp = json.loads(Path(a.expected).read_text())
    agents = []
    for spec in a.agents:
        user, _, rest = spec.partition("=")
        d, _, pid = rest.partition(":")
        need = exp["by_user"].get(user, {}).get("events", 0)
        agents.append({"user": user, "dir": Path(d), "pid": int(pid) if pid else None, "need": need,
                       "received": None, "stable_since": None, "done": False, "v": None})
    start = time.monotonic()
    deadline = start + a.timeout
    next_line = start
    while True:
        now = time.monotonic()
        for ag in agents:
            if not alive(ag["pid"]):
                say(f"error: the agent of {ag['user']} (pid {ag['pid']}) exited; see its log")
                return 1
            try:
                _, v = agent_status(ag["dir"])
            except (OSError, ValueError, urllib.error.URLError) as e:
                ag["err"] = str(e)
                continue
            ag["v"] = v
            received = n(v, "counters", "received")
            if received != ag["received"]:
                ag["received"], ag["stable_since"] = received, now
            delivered = n(v, "counters", "delivered")
            paused = (v.get("sync") or {}).get("paused_reason")
            if paused:
                say(f"error: {ag['user']}'s agent paused sync: {paused} (see its log and `apiary-agent status`)")
                return 1
            ag["done"] = (n(v, "pending_events") == 0 and delivered >= ag["need"]
                          and now - ag["stable_since"] >= a.quiet)
        if all(ag["done"] for ag in agents):
            for ag in agents:
                v = ag["v"]
                c = v.get("counters", {})
                say(f"    {ag['user']:<8} received {c.get('received', 0):>4}  delivered {c.get('delivered', 0):>4}  "
                    f"duplicate {c.get('duplicate', 0):>4}  filtered {c.get('filtered', 0):>4}  "
                    f"rejected {c.get('rejected', 0)}  pending {v.get('pending_events', 0)}  "
                    f"balanced {v.get('balanced')}")
            return 0
        if now >= deadline:
            say(f"error: not everything was delivered within {a.timeout:g}s (APIARY_DEMO_TIMEOUT):")
            for ag in agents:
                v = ag["v"] or {}
                c = v.get("counters", {})
                say(f"    {ag['user']}: received {c.get('received')}, delivered {c.get('delivered')} "
                    f"(needs >= {ag['need']}), pending {v.get('pending_events')}, sync "
                    f"{json.dumps(v.get('sync'))}, last push {json.dumps(v.get('last_push'))}, "
                    f"health {json.dumps(v.get('health'))} {ag.get('err', '')}")
            return 1
        if now >= next_line:
            say("    " + "   ".join(
                f"{ag['user']}: {n(ag['v'], 'counters', 'delivered')}/{ag['need']} delivered, "
                f"{n(ag['v'], 'pending_events')} pending" for ag in agents) + f"   ({now - start:.0f}s)")
            next_line = now + 3
        time.sleep(0.3)


def cmd_wait_status(a):
    exp = json.loads(Path(a.expected).read_text())
    token = Path(a.token_file).read_text().strip()
    want = {sid: m["label"] for sid, m in exp["sessions"].items() if m["status"] == a.status}
    start = time.monotonic()
    got: dict = {}
    while True:
        for sid in want:
            try:
                _, v = get_json(f"{a.url.rstrip('/')}/v1/sessions/{urllib.parse.quote(sid, safe='')}", token)
                got[sid] = v.get("status")
            except (OSError, ValueError, urllib.error.URLError) as e:
                got[sid] = f"? ({e})"
        waited = time.monotonic() - start
        if all(got.get(sid) == a.status for sid in want):
            for sid, label in want.items():
                say(f"    {label}: {a.status} after {waited:.0f}s")
            return 0
        if waited >= a.timeout:
            for sid, label in want.items():
                say(f"error: {label} ({sid}) reads {got.get(sid)}, not {a.status}, after {a.timeout:g}s")
            return 1
        time.sleep(0.5)


def cmd_receiver(a):
    secret = a.secret.encode()
    out = Path(a.out)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            sig = self.headers.get("X-Apiary-Signature") or ""
            parts = dict(p.split("=", 1) for p in sig.split(",") if "=" in p)
            want = hmac.new(secret, f"{parts.get('t', '')}.".encode() + body, hashlib.sha256).hexdigest()
            ok = hmac.compare_digest(want, parts.get("v1", ""))
            try:
                payload = json.loads(body)
            except ValueError:
                payload = None
            with out.open("a") as f:
                f.write(json.dumps({"verified": ok, "body": payload}) + "\n")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    Path(a.port_file).write_text(str(srv.server_address[1]))
    srv.serve_forever()


def cmd_budget_limit(a):
    token = Path(a.token_file).read_text().strip()
    now = datetime.datetime.now(datetime.timezone.utc)
    first = now.date().replace(day=1)
    nxt = (first + datetime.timedelta(days=32)).replace(day=1)
    _, v = get_json(f"{a.url.rstrip('/')}/v1/usage?from={first}&to={nxt}", token, timeout=10)
    spent = int(v["totals"]["cost_nanos"])
    if spent <= 0:
        say("error: nothing was spent this month")
        return 1
    limit = -(-spent * 100 // int(a.share))  # ceil: the spend is at most `share` percent of it
    print(f"{limit // 1_000_000_000}.{limit % 1_000_000_000:09d}")
    return 0


def cmd_wait_webhook(a):
    start = time.monotonic()
    path = Path(a.file)
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= a.count:
            for line in lines:
                r = json.loads(line)
                b = r["body"] or {}
                say(f"    received {b.get('event', '?')}: {b.get('alert', {}).get('summary', '?')}")
                say(f"      idempotency key {b.get('idempotency_key')}, signature "
                    + ("verified (HMAC-SHA256)" if r["verified"] else "DID NOT VERIFY"))
            return 0 if all(json.loads(l)["verified"] for l in lines) else 1
        if time.monotonic() - start >= a.timeout:
            say(f"error: {len(lines)} notification(s) after {a.timeout:g}s, expected {a.count}")
            return 1
        time.sleep(0.3)


def label_of(name: str) -> str:
    """The label a person would give colony `name`: billing_refactor -> Billing refactor."""
    words = name.replace("_", " ").strip()
    return words[:1].upper() + words[1:] if words else name


def cmd_label_colonies(a):
    admin = Path(a.admin_token_file).read_text().strip()
    labelled = 0
    for spec in a.agents:
        user, _, d = spec.partition("=")
        try:
            _, v = agent_get(Path(d), "/v1/colonies")
        except (OSError, ValueError, urllib.error.URLError) as e:
            say(f"error: cannot read the colonies of {user}'s agent: {e}")
            return 1
        for c in v.get("colonies", []):
            key, label = c["key"], label_of(c["name"])
            req = urllib.request.Request(
                f"{a.url.rstrip('/')}/v1/colonies/{urllib.parse.quote(key, safe='')}/label",
                data=json.dumps({"label": label}).encode(), method="PUT",
                headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    r.read()
            except urllib.error.HTTPError as e:
                if e.code == 404:  # the colony never ran with sharing on: the ingest has no run of it
                    say(f"    {user}: {c['name']} ({key}) has no run on the ingest yet; not labelled")
                    continue
                say(f"error: labelling {key}: HTTP {e.code} {e.read()[:200]!r}")
                return 1
            say(f"    {user}: {key} -> {label!r}")
            labelled += 1
    if labelled == 0:
        say("error: no colony was labelled")
        return 1
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("free-port").set_defaults(fn=cmd_free_port)
    p = sub.add_parser("db-url")
    p.add_argument("url")
    p.add_argument("name")
    p.set_defaults(fn=cmd_db_url)
    p = sub.add_parser("wait-http")
    p.add_argument("url")
    p.add_argument("--pid", type=int)
    p.add_argument("--log")
    p.add_argument("--timeout", type=float, default=30)
    p.set_defaults(fn=cmd_wait_http)
    p = sub.add_parser("wait-agent")
    p.add_argument("dir")
    p.add_argument("--pid", type=int)
    p.add_argument("--log")
    p.add_argument("--timeout", type=float, default=30)
    p.set_defaults(fn=cmd_wait_agent)
    p = sub.add_parser("wait-drained")
    p.add_argument("--expected", required=True)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--quiet", type=float, default=2.0, help="seconds without newly received events")
    p.add_argument("agents", nargs="+", metavar="USER=DIR[:PID]")
    p.set_defaults(fn=cmd_wait_drained)
    p = sub.add_parser("wait-status")
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--expected", required=True)
    p.add_argument("--status", required=True)
    p.add_argument("--timeout", type=float, default=60)
    p.set_defaults(fn=cmd_wait_status)
    p = sub.add_parser("receiver")
    p.add_argument("--port-file", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--secret", required=True)
    p.set_defaults(fn=cmd_receiver)
    p = sub.add_parser("budget-limit")
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--share", type=int, required=True, help="percent of the limit already spent")
    p.set_defaults(fn=cmd_budget_limit)
    p = sub.add_parser("label-colonies")
    p.add_argument("--url", required=True)
    p.add_argument("--admin-token-file", required=True)
    p.add_argument("agents", nargs="+", metavar="USER=AGENT_DIR")
    p.set_defaults(fn=cmd_label_colonies)
    p = sub.add_parser("wait-webhook")
    p.add_argument("--file", required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60)
    p.set_defaults(fn=cmd_wait_webhook)
    a = ap.parse_args(argv)
    return a.fn(a) or 0


if __name__ == "__main__":
    sys.exit(main())
