"""`mailqueue`: the operator's command line (postqueue, postsuper, postcat, qshape).

Talks to the admin API over SigV4-signed HTTP (`--api URL` or MAILQUEUE_API), or, with
`--local`, straight to the storage (table, bucket and queues from flags or MQ_* variables)
through the very same request handling. Bulk actions run as jobs: over HTTP the CLI polls
the job; locally it runs the job loop itself. Progress goes to stderr, results to stdout.

Exit status: 0 done, 1 refused (bad input, unknown id), 2 usage, 3 busy (a delivery
holds the mail: try again), 4 server or transport failure, 5 a job gave up on groups,
6 conflict (an Idempotency-Key reused with another message: retrying will not help),
7 not authorised (no or a wrong token, an unsigned or refused caller).

One piece (~850 lines): the queue commands (list, size, shape, show, the actions, job,
send) share the filter flags, the two clients every request goes through (SigV4 over
HTTP, `--local`) and the renderers, and the parser that names them all; the command
families that stand alone (`dkim`, `doctor`, `suppress`, `suspend`, `reputation`,
`smtpd`) and what `show` says of a finished mail (`finished`) are their own modules.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import json
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from mailqueue.cli import doctor as cli_doctor
from mailqueue.cli import pool as cli_pool
from mailqueue.cli import suppress as cli_suppress
from mailqueue.cli import suspend as cli_suspend
from mailqueue.cli.common import (  # noqa: F401 (the exit codes are part of the CLI's API)
    EXIT_BUSY,
    EXIT_CONFLICT,
    EXIT_FAILED,
    EXIT_GAVE_UP,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNAUTHORISED,
    EXIT_USAGE,
    TOKEN_HINT,
    Answer,
    CliError,
    _json_body,
    _lower,
    _ok,
    _refusal,
)
from mailqueue.cli.finished import GONE, finished_status, group_line, unsignable
from mailqueue.core.config import ConfigError, StorageSettings, settings_from_env
from mailqueue.core.errors import MailqueueError
from mailqueue.core.model import Result

ACTIONS = ("delete", "hold", "release", "retry", "bounce")
FILTER_FLAGS = (
    ("state", "comma-separated group states: queued,inflight,held,dsn,done"),
    ("sender", "envelope sender (<> for the null sender)"),
    ("recipient", "a recipient address"),
    ("domain", "a recipient domain"),
    ("age_min", "arrived at least this long ago (90s, 15m, 2h, 3d)"),
    ("age_max", "arrived at most this long ago"),
    ("attempts_min", "a recipient with at least this many attempts"),
    ("status", "last status: SMTP code or prefix (4, 451) or enhanced (4.4, 4.4.1)"),
)
_REGION_RE = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com", re.I)




# ---------------------------------------------------------------------- transports



class Client(Protocol):
    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer: ...

    def drive_job(
        self, job: dict[str, Any], progress: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]: ...


class HttpClient:
    """The admin API over HTTP, SigV4-signed for API Gateway's IAM auth (or a dev token)."""

    def __init__(
        self,
        api: str,
        *,
        sign: bool = True,
        token: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        poll_seconds: float = 1.0,
        timeout: float = 60.0,
    ) -> None:
        parts = urllib.parse.urlsplit(api)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CliError(f"--api must be an http(s) URL, not {api!r}", EXIT_USAGE)
        self.base = api.rstrip("/")
        self.sign = sign
        self.token = token
        self.poll_seconds = poll_seconds
        self.timeout = timeout
        self._credentials: Any = None
        self.region = region
        self.profile = profile

    def _signer(self) -> tuple[Any, str]:
        import boto3

        session = boto3.session.Session(profile_name=self.profile)
        region = self.region or session.region_name
        if not region:
            m = _REGION_RE.search(self.base)
            region = m.group(1) if m else None
        if not region:
            raise unsignable(self.base, "no AWS region: give --region or set AWS_REGION")
        creds = session.get_credentials()
        if creds is None:
            raise unsignable(self.base, "no AWS credentials found to sign the request")
        return creds.get_frozen_credentials(), region

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode(sorted(query.items()), quote_via=urllib.parse.quote)
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"accept": "application/json", **(headers or {})}
        if data is not None:
            hdrs["content-type"] = "application/json"
        if self.sign:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest

            creds, region = self._signer()
            req = AWSRequest(method=method, url=url, data=data, headers=hdrs)
            SigV4Auth(creds, "execute-api", region).add_auth(req)
            hdrs = dict(req.headers.items())
        elif self.token:
            hdrs["authorization"] = f"Bearer {self.token}"
        out = urllib.request.Request(url, data=data, headers=hdrs, method=method)
        try:
            with urllib.request.urlopen(out, timeout=self.timeout) as resp:
                return resp.status, _json_body(resp.read()), _lower(resp.headers.items())
        except urllib.error.HTTPError as e:
            return e.code, _json_body(e.read()), _lower(e.headers.items())
        except (urllib.error.URLError, OSError) as e:
            raise CliError(f"cannot reach {self.base}: {e}", EXIT_FAILED) from e

    def drive_job(
        self, job: dict[str, Any], progress: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Poll until the job is no longer running (the API side runs it)."""
        while job.get("state") == "running":
            progress(job)
            time.sleep(self.poll_seconds)
            status, job, _ = self.request("GET", f"/v1/queue/jobs/{job['job_id']}")
            if status != 200:
                raise _refusal(status, job)
        progress(job)
        return job


class LocalClient:
    """The admin API in-process, on the storage directly (no HTTP, no Lambda)."""

    def __init__(self, settings: Any, actor: str) -> None:
        from mailqueue.backends.aws.clients import make_clients
        from mailqueue.compose.admin import build_admin, default_doctor
        from mailqueue.services.admin import AdminApi, NullLauncher

        clients = make_clients(
            region=settings.storage.region, endpoint_url=settings.storage.endpoint_url
        )
        self.service = build_admin(settings, clients)
        self.api = AdminApi(self.service, NullLauncher(), doctor=default_doctor)
        self.actor = actor

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        from mailqueue.services.admin.api import dispatch

        raw = json.dumps(body).encode() if body is not None else None
        reply = dispatch(self.api, method, path, dict(query or {}), raw, self.actor)
        return reply.status, reply.body, _lower(reply.headers.items())

    def drive_job(
        self, job: dict[str, Any], progress: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Run the job loop here, a slice at a time, reporting after every checkpoint."""
        job_id = job["job_id"]
        while job.get("state") == "running":
            progress(job)
            got = self.service.run_job(
                job_id, budget_seconds=30.0, progress=lambda j: progress(j.to_json())
            )
            job = got.to_json()
            if job["state"] == "running" and got.lease_until and not self.service.job_stalled(got):
                time.sleep(1.0)  # another runner holds it: wait for it
        progress(job)
        return job


def _age(seconds: float) -> str:
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def _when(iso: str | None, now: datetime) -> str:
    if not iso:
        return "-"
    ts = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    delta = (ts - now).total_seconds()
    return (
        "now" if abs(delta) < 1 else (f"in {_age(delta)}" if delta > 0 else f"{_age(-delta)} ago")
    )


def _result(r: Mapping[str, Any] | None) -> str:
    if not r:
        return ""
    return f"({Result.from_json(dict(r)).describe()})"


class ListTotals:
    """What `list` printed so far: the groups seen (a group the index shows under two states
    while a delivery moves it, its reads being eventually consistent, is printed once) and
    the mails and bytes for the closing `mailq`-style line."""

    def __init__(self) -> None:
        self.groups: set[tuple[str, str]] = set()
        self.mails: dict[str, int] = {}
        self.recipients = 0

    def fresh(self, items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        out = []
        for g in items:
            key = (str(g["mail_id"]), str(g["group"]))
            if key in self.groups:
                continue
            self.groups.add(key)
            self.mails[key[0]] = int(g.get("size") or 0)
            self.recipients += len(g.get("recipients") or ())
            out.append(g)
        return out

    def line(self, more: bool) -> str:
        if not self.groups:
            return "Mail queue is empty" + (" (on this page; more follow)" if more else "")
        kbytes = (sum(self.mails.values()) + 1023) // 1024
        n = len(self.mails)
        text = (
            f"-- {kbytes} Kbytes in {n} Request{'s' if n != 1 else ''}, "
            f"{len(self.groups)} group(s), {self.recipients} recipient(s)"
        )
        return text + (" shown (more follow)" if more else ".")


def render_groups(items: Sequence[Mapping[str, Any]], out: TextIO, header: bool) -> None:
    """postqueue -p style: one line per group, then its recipients indented."""
    now = datetime.now(UTC)
    if header:
        out.write(
            f"{'MAIL ID':<26} {'GROUP':<24} {'STATE':<8} {'AGE':>7} {'NEXT':>12} "
            f"{'SIZE':>8} {'TRIES':>5}  SENDER\n"
        )
    for g in items:
        out.write(
            f"{g['mail_id']:<26} {g['group'][:24]:<24} {g['state']:<8} "
            f"{_age(g.get('age_seconds', 0)):>7} {_when(g.get('next_attempt_at'), now):>12} "
            f"{g.get('size', 0):>8} {g.get('attempts', 0):>5}  {g.get('sender') or '<>'}\n"
        )
        for r in g.get("recipients", []):
            out.write(
                f"    {r['address']}  {r['state']}  {_result(r.get('last_result'))}".rstrip() + "\n"
            )


def render_size(doc: Mapping[str, Any], out: TextIO) -> None:
    """Pending recipients (and groups) by state, what the index still holds of finished
    ones, then recipients by domain.

    The index counts what is in the queue, not what the queue has done: a finished solo mail
    (most one-recipient mails) leaves it at its result, other groups at cleanup. So the
    finished rows are labelled as such and never read as "delivered so far" (issue 44);
    the event log (`make report`) counts every delivery and bounce."""
    pending_states = ("queued", "inflight", "held")
    final_states = ("delivered", "bounced", "deleted")
    rcpt_states = (*pending_states, *final_states)
    rc, gc = doc.get("recipients", {}), doc.get("groups", {})
    out.write(f"{'IN THE QUEUE':<14} {'RECIPIENTS':>10} {'GROUPS':>8}\n")
    for st in pending_states:
        out.write(f"{st:<14} {rc.get(st, 0):>10} {gc.get(st, 0):>8}\n")
    if gc.get("dsn"):
        out.write(f"{'dsn':<14} {'-':>10} {gc.get('dsn', 0):>8}\n")
    out.write(f"{'pending':<14} {doc.get('pending', 0):>10}\n")
    finished = [st for st in final_states if rc.get(st)]
    if finished or gc.get("done"):
        out.write(
            "\nFINISHED, NOT YET CLEANED UP (solo mails leave the index at their result,\n"
            "others at cleanup: these are not totals; `make report` counts every result)\n"
        )
        for st in finished:
            out.write(f"{st:<14} {rc.get(st, 0):>10}\n")
        if gc.get("done"):
            out.write(f"{'done (groups)':<14} {'-':>10} {gc.get('done', 0):>8}\n")
    else:
        out.write(
            "\n(finished mails are not counted here: solo mails leave the index at their\n"
            "result, others at cleanup; `make report` counts every delivery and bounce)\n"
        )
    domains = doc.get("domains", {})
    if domains:
        out.write(f"\n{'DOMAIN':<32} " + " ".join(f"{st:>9}" for st in rcpt_states) + "\n")
        order = sorted(
            domains.items(),
            key=lambda kv: (-sum(kv[1].get(st, 0) for st in pending_states), kv[0]),
        )
        for dom, counts in order:
            cells = " ".join(f"{counts.get(st, 0):>9}" for st in rcpt_states)
            out.write(f"{dom[:32]:<32} {cells}\n")
    if doc.get("evaluated") is not None:
        out.write(f"\n({doc['evaluated']} group(s) read from the by_state index)\n")


def render_mail(doc: Mapping[str, Any], out: TextIO) -> None:
    """postcat style: envelope, recipients with their history, headers, body."""
    out.write("*** ENVELOPE RECORDS ***\n")
    for k in ("mail_id", "sender", "arrival", "size", "sha256", "ret", "envid", "smtputf8"):
        v = doc.get(k)
        if v is not None:
            out.write(f"{k}: {v if v != '' else '<>'}\n")
    out.write(finished_status(doc))
    for g in doc.get("groups", []):
        out.write(group_line(g))
        for r in g.get("recipients", []):
            out.write(
                f"  recipient {r['id']}: {r['address']}  {r['state']}  attempts: "
                f"{r['attempts']}  {_result(r.get('last_result'))}".rstrip()
                + "\n"
            )
        for a in g.get("history", []):
            res = a.get("result") or {}
            out.write(
                f"  attempt {a['number']} at {a['started_at']}: {_result(res)}"
                + (" tls" if a.get("tls") else "")
                + "\n"
            )
    out.write("*** HEADER RECORDS ***\n")
    if doc.get("headers") is None:
        out.write(f"(content {doc.get('content', 'missing')})\n")
    elif doc.get("header_block") is not None:  # as stored, folding kept (postcat -h)
        block = str(doc["header_block"]).replace("\r\n", "\n")
        out.write(block if block.endswith("\n") else block + "\n")
    else:
        for name, value in doc.get("headers") or []:
            out.write(f"{name}: {value}\n")
    if "body" in doc:
        out.write("*** MESSAGE CONTENTS ***\n")
        out.write(doc["body"])
        if not doc["body"].endswith("\n"):
            out.write("\n")
        if doc.get("body_truncated"):
            out.write("(body truncated)\n")


class Progress:
    """A plain-text progress line on stderr (rewritten in place on a terminal)."""

    def __init__(self, out: TextIO, enabled: bool = True) -> None:
        self.out = out
        self.enabled = enabled
        self.tty = out.isatty()
        self.last = ""

    def __call__(self, job: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        c = job.get("counts", {})
        est = job.get("estimate")
        done = c.get("examined", 0)
        running = job.get("state") == "running"
        if est and running:
            # the estimate is the index's count when the job started: the queue may have
            # grown since, so the total shown never falls below what was examined
            total = max(int(est), done + 1)
            frac = done / total
            bar = "#" * int(frac * 30)
            head = f"[{bar:<30}] {int(frac * 100):3d}% {done}/~{total} groups"
        elif est or not running:
            head = f"[{'#' * 30}] 100% {done}/{done} groups"
        else:
            head = f"{done} groups examined"
        line = (
            f"{head}, {c.get('applied', 0)} changed, {c.get('recipients', 0)} recipients"
            f", busy {job.get('busy', 0)}  ({job.get('state')})"
        )
        if line == self.last:
            return
        self.last = line
        if self.tty:
            self.out.write("\r" + line)
            if job.get("state") != "running":
                self.out.write("\n")
        else:
            self.out.write(line + "\n")
        self.out.flush()


# ---------------------------------------------------------------------- commands
def _filter_params(ns: argparse.Namespace) -> dict[str, str]:
    return {k: str(getattr(ns, k)) for k, _ in FILTER_FLAGS if getattr(ns, k, None) is not None}


def _emit_json(doc: Any, out: TextIO) -> None:
    out.write(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")


def cmd_list(c: Client, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    query = _filter_params(ns)
    query["sort"] = ns.sort
    query["limit"] = str(ns.limit)
    if ns.cursor:
        query["cursor"] = ns.cursor
    totals = ListTotals()
    while True:
        page = _ok(c.request("GET", "/v1/queue/mails", query))
        items = totals.fresh(page["items"])
        if ns.json:
            for g in items:
                _emit_json(g, out)
        elif items:
            render_groups(items, out, header=len(totals.groups) == len(items))
        cursor = page.get("cursor")
        more = bool(cursor) and not ns.all
        if not ns.json and (not cursor or more):
            out.write(totals.line(more) + "\n")
        if not cursor:
            return EXIT_OK
        if more:
            err.write(f"more: --cursor {cursor}\n")
            return EXIT_OK
        query["cursor"] = cursor


def cmd_size(c: Client, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    doc = _ok(c.request("GET", "/v1/queue/size"))
    if ns.json:
        _emit_json(doc, out)
    else:
        render_size(doc, out)
    return EXIT_OK


def cmd_shape(c: Client, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from mailqueue.services.admin.shape import render_shape

    query = _filter_params(ns)
    query.update(bucket_minutes=str(ns.bucket_minutes), buckets=str(ns.buckets), by=ns.by)
    if ns.top:
        query["top"] = str(ns.top)
    doc = _ok(c.request("GET", "/v1/queue/shape", query))
    if ns.json:
        _emit_json(doc, out)
    else:
        out.write(render_shape(doc) + "\n")
    return EXIT_OK


def cmd_show(c: Client, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    query = {"body": "true"} if ns.body else {}
    answer = c.request("GET", f"/v1/queue/mails/{urllib.parse.quote(ns.mail_id, safe='')}", query)
    if answer[0] == 404 and answer[1].get("error") == "not_found":
        raise CliError(f"{ns.mail_id}: {GONE}")
    doc = _ok(answer)
    if ns.json:
        _emit_json(doc, out)
    else:
        render_mail(doc, out)
    return EXIT_OK


def cmd_action(c: Client, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    action: str = ns.command
    flt = _filter_params(ns)
    if ns.mail_ids:
        if flt or ns.all:
            raise CliError("give mail ids, or filters / --all, not both", EXIT_USAGE)
        status = EXIT_OK
        for mid in ns.mail_ids:
            query = {"group": ns.group} if ns.group else {}
            path = f"/v1/queue/mails/{urllib.parse.quote(mid, safe='')}/{action}"
            try:
                doc = _ok(c.request("POST", path, query))
            except CliError as e:
                err.write(f"mailqueue: {mid}: {e}\n")
                status = max(status, e.code)
                continue
            if ns.json:
                _emit_json(doc, out)
            else:
                out.write(f"{mid}: {action}: {doc['recipients']} recipient(s)\n")
        return status
    if ns.group:
        raise CliError("--group needs a mail id", EXIT_USAGE)
    if not flt and not ns.all:
        raise CliError(
            f"{action}: give mail ids, filters, or --all for the whole queue", EXIT_USAGE
        )
    body: dict[str, Any] = {"action": action, "filter": flt}
    if ns.all:
        body["all"] = True
    job = _ok(c.request("POST", "/v1/queue/jobs", body=body), (202,))
    err.write(f"job {job['job_id']} started: {action}\n")
    if ns.no_wait:
        if ns.json:
            _emit_json(job, out)
        else:
            out.write(job["job_id"] + "\n")
        return EXIT_OK
    return _finish_job(c, job, ns, out, err)


def _finish_job(
    c: Client, job: dict[str, Any], ns: argparse.Namespace, out: TextIO, err: TextIO
) -> int:
    job = c.drive_job(job, Progress(err, enabled=not ns.quiet))
    if ns.json:
        _emit_json(job, out)
    else:
        cnt = job["counts"]
        out.write(
            f"job {job['job_id']} {job['state']}: {job['action']} {cnt['applied']} group(s), "
            f"{cnt['recipients']} recipient(s); examined {cnt['examined']}, matched "
            f"{cnt['matched']}, unchanged {cnt['unchanged']}, finished {cnt['finished']}, "
            f"gave up {cnt['given_up']}\n"
        )
    return EXIT_GAVE_UP if job["counts"].get("given_up") else EXIT_OK


def cmd_job(c: Client, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = f"/v1/queue/jobs/{urllib.parse.quote(ns.job_id, safe='')}"
    if ns.cancel:
        job = _ok(c.request("POST", path + "/cancel"))
    else:
        job = _ok(c.request("GET", path))
    if ns.wait and job.get("state") == "running":
        return _finish_job(c, job, ns, out, err)
    if ns.json:
        _emit_json(job, out)
    else:
        out.write(json.dumps(job, indent=2) + "\n")
    return EXIT_OK


def submission_body(ns: argparse.Namespace, content: bytes) -> dict[str, Any]:
    """The POST /v1/messages document for `send`'s options (the API validates it)."""
    notify = [n.strip().upper() for n in ns.notify.split(",") if n.strip()] if ns.notify else None
    rcpts: list[Any] = []
    for i, addr in enumerate(ns.to):
        r: dict[str, Any] = {"address": addr}
        if notify:
            r["notify"] = notify
        if ns.orcpt and i < len(ns.orcpt):
            r["orcpt"] = ns.orcpt[i]
        rcpts.append(r if len(r) > 1 else addr)
    body: dict[str, Any] = {
        "sender": "" if ns.sender in ("<>", "") else ns.sender,
        "recipients": rcpts,
        "content": base64.b64encode(content).decode(),
    }
    if ns.ret:
        body["ret"] = ns.ret.upper()
    if ns.envid:
        body["envid"] = ns.envid
    if ns.not_before:
        body["not_before"] = _not_before_arg(ns.not_before)
    if ns.smtputf8:
        body["smtputf8"] = True
    if getattr(ns, "priority", None):
        body["priority"] = ns.priority
    if ns.tag:
        tags: dict[str, str] = {}
        for t in ns.tag:
            name, sep, value = t.partition("=")
            if not sep or not name:
                raise CliError(f"--tag wants NAME=VALUE, not {t!r}", EXIT_USAGE)
            tags[name] = value
        body["tags"] = tags
    return body


def _not_before_arg(text: str) -> str:
    """An ISO-8601 time, or a delay from now (90s, 15m, 2h, 3d)."""
    m = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if m:
        secs = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return datetime.fromtimestamp(time.time() + secs, UTC).isoformat(timespec="seconds")
    return text


def cmd_send(c: Client, ns: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        with open(ns.file, "rb") if ns.file != "-" else sys.stdin.buffer as f:
            content = f.read()
    except OSError as e:
        raise CliError(f"cannot read {ns.file}: {e}", EXIT_USAGE) from e
    body = submission_body(ns, content)
    headers = {"Idempotency-Key": ns.idempotency_key} if ns.idempotency_key else None
    answer = c.request("POST", "/v1/messages", body=body, headers=headers)
    doc = _ok(answer, (200, 201, 202))
    replayed = answer[2].get("idempotent-replayed") == "true"
    if ns.json:
        _emit_json({**doc, "duplicate": replayed}, out)
    else:
        rcpts = doc.get("recipients") or []
        dup = " (already queued)" if replayed else ""
        out.write(f"queued {doc.get('mail_id')} for {len(rcpts)} recipient(s){dup}\n")
    return EXIT_OK


COMMANDS: dict[str, Callable[[Client, argparse.Namespace, TextIO, TextIO], int]] = {
    "list": cmd_list,
    "size": cmd_size,
    "shape": cmd_shape,
    "show": cmd_show,
    "job": cmd_job,
    "send": cmd_send,
    "doctor": cli_doctor.cmd_doctor,
    "suppression": cli_suppress.cmd_suppression,
    **cli_suspend.COMMANDS,
    **cli_pool.COMMANDS,
    **dict.fromkeys(ACTIONS, cmd_action),
}


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    # SUPPRESS: a subcommand's defaults must not overwrite flags given before it
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    g = common.add_argument_group("connection")
    g.add_argument("--api", help="admin API base URL (default: $MAILQUEUE_API)")
    g.add_argument("--local", action="store_true", help="use the storage directly, no API")
    g.add_argument("--region", help="AWS region (signing, --local)")
    g.add_argument("--profile", help="AWS profile for credentials")
    g.add_argument("--no-sign", action="store_true", help="do not SigV4-sign (local stack)")
    g.add_argument("--token", help="dev bearer token with --no-sign (default: $MAILQUEUE_TOKEN)")
    g.add_argument("--table", help="--local: state table (default: $MQ_TABLE)")
    g.add_argument("--bucket", help="--local: content bucket (default: $MQ_BUCKET)")
    g.add_argument("--delivery-queue-url", help="--local: default $MQ_DELIVERY_QUEUE_URL")
    g.add_argument("--bounce-queue-url", help="--local: default $MQ_BOUNCE_QUEUE_URL")
    g.add_argument("--endpoint-url", help="--local: AWS endpoint (moto, local stack)")
    common.add_argument("--json", action="store_true", help="JSON output, one object per line")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    def filters(p: argparse.ArgumentParser) -> None:
        fg = p.add_argument_group("filters")
        for name, help_ in FILTER_FLAGS:
            fg.add_argument("--" + name.replace("_", "-"), dest=name, help=help_)

    parser = argparse.ArgumentParser(
        prog="mailqueue",
        description="Administer the mail queue: list, size, shape, show, delete, hold, "
        "release, retry, bounce, jobs; and send a message.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "list",
        aliases=["ls", "browse"],
        parents=[common],
        help="browse the queue (postqueue -p / -j)",
    )
    filters(p)
    p.add_argument("--sort", choices=("next", "arrival"), default="next")
    p.add_argument("--limit", type=int, default=100, help="page size")
    p.add_argument("--cursor", help="resume a listing")
    p.add_argument("--all", action="store_true", help="follow every page")

    sub.add_parser("size", parents=[common], help="counts by state and recipient domain")

    p = sub.add_parser(
        "shape", aliases=["qshape"], parents=[common], help="domain × age matrix (qshape)"
    )
    filters(p)
    p.add_argument("--bucket-minutes", type=int, default=5)
    p.add_argument("--buckets", type=int, default=10)
    p.add_argument("--by", choices=("recipient", "sender"), default="recipient")
    p.add_argument("--top", type=int, help="show only the N largest domains")

    p = sub.add_parser(
        "show", aliases=["cat", "inspect"], parents=[common], help="one mail (postcat)"
    )
    p.add_argument("mail_id")
    p.add_argument("--body", action="store_true", help="include the message body")

    for action, help_ in (
        ("delete", "delete mails; no DSN (postsuper -d)"),
        ("hold", "put on hold: neither delivered nor expired (postsuper -h)"),
        ("release", "release from hold (postsuper -H)"),
        ("retry", "attempt now (postqueue -f / -i)"),
        ("bounce", "expire now with a failure DSN, status 4.4.7"),
    ):
        p = sub.add_parser(action, parents=[common], help=help_)
        p.add_argument("mail_ids", nargs="*", metavar="MAIL_ID")
        p.add_argument("--group", help="only this destination group of the mail")
        p.add_argument("--all", action="store_true", help="the whole queue (a job)")
        p.add_argument("--no-wait", action="store_true", help="start the job and print its id")
        filters(p)

    p = sub.add_parser("job", parents=[common], help="a bulk job's progress")
    p.add_argument("job_id")
    p.add_argument("--wait", action="store_true", help="follow it to the end")
    p.add_argument("--cancel", action="store_true", help="stop it at its next checkpoint")

    p = sub.add_parser("send", parents=[common], help="submit a message (POST /v1/messages)")
    p.add_argument("--from", dest="sender", required=True, help="envelope sender (<> for none)")
    p.add_argument("--to", action="append", required=True, help="a recipient (repeatable)")
    p.add_argument("--file", required=True, help="the RFC 5322 message (- for stdin)")
    p.add_argument("--idempotency-key", help="retries with the same key queue one mail")
    p.add_argument(
        "--not-before", help="first attempt not before: ISO-8601 time, or a delay (90s, 15m, 2h)"
    )
    p.add_argument("--notify", help="NOTIFY for every recipient: NEVER or SUCCESS,FAILURE,DELAY")
    p.add_argument(
        "--orcpt", action="append", help="ORCPT of the n-th --to (rfc822;addr), repeatable"
    )
    p.add_argument("--ret", choices=("FULL", "HDRS", "full", "hdrs"), help="DSN RET")
    p.add_argument("--envid", help="DSN ENVID")
    p.add_argument("--smtputf8", action="store_true", help="the mail needs SMTPUTF8")
    p.add_argument(
        "--tag", action="append", metavar="NAME=VALUE", help="a message tag (repeatable)"
    )
    p.add_argument(
        "--priority",
        choices=("transactional", "bulk"),
        help="delivery path (default: the API's, transactional unless the caller is bulk)",
    )
    cli_doctor.add_parser(sub, common)
    cli_suppress.add_parser(sub, common)
    cli_suspend.add_parsers(sub, common)
    cli_pool.add_parsers(sub, common)
    return parser


COMMON_DEFAULTS: dict[str, Any] = {
    "api": None,
    "local": False,
    "region": None,
    "profile": None,
    "no_sign": False,
    "token": None,
    "table": None,
    "bucket": None,
    "delivery_queue_url": None,
    "bounce_queue_url": None,
    "endpoint_url": None,
    "json": False,
    "quiet": False,
}
_ALIASES = {"ls": "list", "browse": "list", "qshape": "shape", "cat": "show", "inspect": "show"}


def make_client(ns: argparse.Namespace, env: Mapping[str, str]) -> Client:
    if ns.local:
        if ns.command == "send":
            raise CliError("send talks to the API: give --api, not --local", EXIT_USAGE)
        from mailqueue.services.admin.service import admin_settings_from_env

        explicit = {
            "table": ns.table,
            "bucket": ns.bucket,
            "delivery_queue_url": ns.delivery_queue_url,
            "bounce_queue_url": ns.bounce_queue_url,
            "endpoint_url": ns.endpoint_url,
            "region": ns.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        }
        try:
            storage = settings_from_env(StorageSettings, env=env, **explicit)
            settings = admin_settings_from_env(env=env, storage=storage)
        except ConfigError as e:
            raise CliError(f"--local: {e} (flags or MQ_* variables)", EXIT_USAGE) from e
        actor = f"cli:{getpass.getuser()}@{socket.gethostname()}"
        return LocalClient(settings, actor)
    api = ns.api or env.get("MAILQUEUE_API")
    if not api:
        raise CliError("no API: give --api URL, set MAILQUEUE_API, or use --local", EXIT_USAGE)
    token = ns.token or env.get("MAILQUEUE_TOKEN")
    return HttpClient(
        api,
        # a development token (the local stack) replaces SigV4; otherwise sign
        sign=not ns.no_sign and not token,
        token=token,
        # boto3 reads only AWS_DEFAULT_REGION; AWS_REGION is documented (and the CLI's)
        region=ns.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        profile=ns.profile,
    )


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    environ = os.environ if env is None else env
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["dkim"], ["smtpd"]):  # own parsers: cli/dkim.py, cli/smtpd.py
        from mailqueue.cli import dkim, smtpd

        sub = dkim.main if args[0] == "dkim" else smtpd.main
        return sub(args[1:], env=environ, stdout=out, stderr=err)
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage error (or --help)
        return int(e.code or 0)
    for name, default in COMMON_DEFAULTS.items():
        if not hasattr(ns, name):
            setattr(ns, name, default)
    ns.command = _ALIASES.get(ns.command, ns.command)
    try:
        if ns.command == "doctor" and ns.here:
            return cli_doctor.run_here(ns, environ, out, err)
        client = make_client(ns, environ)
        return COMMANDS[ns.command](client, ns, out, err)
    except CliError as e:
        err.write(f"mailqueue: {e}\n")
        return e.code
    except MailqueueError as e:
        err.write(f"mailqueue: {type(e).__name__}: {e}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        err.write("mailqueue: interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
