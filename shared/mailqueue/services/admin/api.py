"""The admin API's requests and answers, independent of the HTTP framework.

`functions/admin/app.py` maps routes onto these methods; the CLI's `--local` mode calls
them directly; so both parse, validate and answer identically. Every method returns a
`Reply` (status, JSON body, headers); refusals carry ``{"error", "message", "field"}``.

Routes (all under IAM auth):
  GET    /v1/queue/mails                      browse (filters, sort, limit, cursor)
  GET    /v1/queue/mails/{mail_id}            inspect (?body=true for the body)
  DELETE /v1/queue/mails/{mail_id}            delete one mail (?group= one group)
  POST   /v1/queue/mails/{mail_id}/{action}   hold | release | retry | bounce | delete
  GET    /v1/queue/size                       counts by state and domain (by_state index)
  GET    /v1/queue/shape                      qshape matrix (filters, bucket_minutes, buckets, by)
  POST   /v1/queue/jobs                       bulk action → 202 + job
                                              {"action", "filter": {...}} or {"action", "all": true}
  GET    /v1/queue/jobs/{job_id}              job progress
  POST   /v1/queue/jobs/{job_id}/cancel       stop a job at its next checkpoint
  GET    /v1/queue/doctor                     DNS checks for direct delivery (outbound.doctor)
  GET|POST /v1/queue/suppressions, GET|DELETE /v1/queue/suppressions/{address}
                                              the suppression list (admin/suppressions.py)
  GET /v1/queue/reputation/{scope}/{target}, POST .../resume   reputation pauses (reputation.py)
  GET /v1/queue/pools, GET /v1/queue/pools/{pool}  egress pools, warm-up (admin/pools.py)
  GET|POST /v1/queue/suspensions, DELETE /v1/queue/suspensions/{scope}/{target}
                                              operator suspensions (admin/suspensions.py)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mailqueue.core.config import ConfigError
from mailqueue.core.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    PermanentStorageError,
    TransientStorageError,
)
from mailqueue.core.jsonbody import parse_body
from mailqueue.outbound.suppression import SuppressionStore
from mailqueue.services.admin.filters import FILTER_KEYS, parse_filter, parse_int
from mailqueue.services.admin.jobs import JobLauncher
from mailqueue.services.admin.service import Action, Busy, OpContext, QueueAdmin, group_view
from mailqueue.services.admin.suppressions import SuppressionApi
from mailqueue.services.admin.suspensions import SuspensionApi

log = logging.getLogger(__name__)

BROWSE_PARAMS = frozenset({"sort", "limit", "cursor"})
SHAPE_PARAMS = frozenset({"bucket_minutes", "buckets", "by", "top"})
JOB_FIELDS = frozenset({"action", "filter", "all"})


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def _error(status: int, code: str, message: str, field: str | None = None, **extra: Any) -> Reply:
    return Reply(status, {"error": code, "message": message, "field": field, **extra})


def _bool(value: str | None, name: str) -> bool:
    if value is None:
        return False
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no", ""):
        return False
    raise InvalidInput("invalid_value", f"{name} must be true or false", name)


def _only(params: Mapping[str, str | None], allowed: frozenset[str]) -> None:
    for key in params:
        if key not in allowed:
            raise InvalidInput("unknown_parameter", f"unknown parameter {key!r}", key)


def _action(value: str) -> Action:
    try:
        return Action(value.strip().lower())
    except ValueError:
        raise InvalidInput(
            "invalid_action",
            "action must be one of " + "|".join(a.value for a in Action),
            "action",
        ) from None


class AdminApi:
    def __init__(
        self,
        service: QueueAdmin,
        launcher: JobLauncher,
        doctor: Callable[[], dict[str, Any]] | None = None,
        suppressions: SuppressionStore | None = None,
    ) -> None:
        self.service = service
        self.launcher = launcher
        self._doctor = doctor  # None: no DNS checks (the composition root passes them)
        self._suppressions = suppressions  # None: the service's own

    def suppressions(self) -> SuppressionApi:
        store = self._suppressions or self.service.suppressions
        if store is None:
            raise ConfigError("no suppression store was given to the admin service")
        return SuppressionApi(store, self.service.clock)

    def suspension(
        self,
        op: str,
        path: Mapping[str, str],
        params: Mapping[str, str | None],
        body: Any,
        actor: str,
    ) -> Reply:
        """list | suspend | resume."""

        def run() -> Reply:
            store = self.service.suspensions
            if store is None:
                raise ConfigError("no suspension store was given to the admin service")
            api = SuspensionApi(store, self.service.clock)
            if op == "list":
                return Reply(200, api.list(params))
            _only(params, frozenset())
            if op == "suspend":
                return Reply(200, api.suspend(_json_object(body), actor))
            return Reply(200, api.resume(path["scope"], path["target"]))

        return self._guard(run)

    def pools(self, name: str | None) -> Reply:
        """The egress pools and their warm-up (admin/pools.py)."""

        def run() -> Reply:
            api = self.service.pools
            if api is None:
                raise ConfigError("no pools were given to the admin service")
            return Reply(200, api.list() if name is None else api.show(name))

        return self._guard(run)

    def reputation(self, op: str, path: Mapping[str, str], body: Any, actor: str) -> Reply:
        """show | resume (admin/reputation.py)."""

        def run() -> Reply:
            api = self.service.reputation
            if api is None:
                raise ConfigError("reputation guards are not configured for the admin service")
            if op == "show":
                return Reply(200, api.show(path["scope"], path["target"]))
            return Reply(200, api.resume(path["scope"], path["target"], actor))

        return self._guard(run)

    def suppression(
        self, op: str, address: str | None, params: Mapping[str, str | None], body: Any, actor: str
    ) -> Reply:
        """list | get | add | remove on the suppression list."""

        def run() -> Reply:
            api = self.suppressions()
            if op == "list":
                return Reply(200, api.list(params))
            _only(params, frozenset())
            if op == "add":
                return Reply(200, api.add(_json_object(body), actor))
            assert address is not None
            return Reply(200, api.get(address) if op == "get" else api.remove(address))

        return self._guard(run)

    def _guard(self, fn: Callable[[], Reply]) -> Reply:
        try:
            return fn()
        except InvalidInput as e:
            return Reply(400, e.to_json())
        except NotFound as e:
            return _error(404, "not_found", f"no such mail, group or job: {e}", None)
        except Busy as e:
            return _error(409, "busy", str(e), None, groups=list(e.groups))
        except Conflict as e:
            return _error(409, "conflict", str(e), None)
        except TransientStorageError as e:
            log.warning("storage unavailable", extra={"cause": str(e)})
            return Reply(
                503,
                {"error": "unavailable", "message": "try again", "field": None},
                {"Retry-After": "1"},
            )
        except PermanentStorageError:
            log.exception("storage failure")
            return _error(500, "internal", "storage failure")

    # ------------------------------------------------------------------ reads
    def browse(self, params: Mapping[str, str | None]) -> Reply:
        def run() -> Reply:
            flt = parse_filter(params, allowed=BROWSE_PARAMS)
            limit = parse_int(params.get("limit") or "50", "limit", low=1, high=1000)
            page = self.service.browse(
                flt,
                sort=(params.get("sort") or "next").strip().lower(),
                limit=limit,
                cursor=params.get("cursor") or None,
            )
            now = self.service.clock()
            return Reply(
                200,
                {
                    "items": [group_view(g, now) for g in page.items],
                    "cursor": page.cursor,
                    "evaluated": page.evaluated,
                },
            )

        return self._guard(run)

    def size(self, params: Mapping[str, str | None]) -> Reply:
        def run() -> Reply:
            _only(params, frozenset())
            return Reply(200, self.service.size().to_json())

        return self._guard(run)

    def shape(self, params: Mapping[str, str | None]) -> Reply:
        def run() -> Reply:
            flt = parse_filter(params, allowed=SHAPE_PARAMS)
            shape = self.service.shape(
                flt,
                bucket_minutes=parse_int(
                    params.get("bucket_minutes") or "5", "bucket_minutes", low=1, high=1440
                ),
                buckets=parse_int(params.get("buckets") or "10", "buckets", low=2, high=30),
                by=(params.get("by") or "recipient").strip().lower(),
            )
            doc = shape.to_json()
            top = params.get("top")
            if top:
                doc["rows"] = doc["rows"][: parse_int(top, "top", low=1, high=100000)]
            return Reply(200, doc)

        return self._guard(run)

    def inspect(self, mail_id: str, params: Mapping[str, str | None]) -> Reply:
        def run() -> Reply:
            _only(params, frozenset({"body"}))
            return Reply(200, self.service.inspect(mail_id, body=_bool(params.get("body"), "body")))

        return self._guard(run)

    # ------------------------------------------------------------------ one mail
    def act(self, mail_id: str, action: str, params: Mapping[str, str | None], actor: str) -> Reply:
        def run() -> Reply:
            _only(params, frozenset({"group"}))
            act = _action(action)
            group = params.get("group") or None
            result = self.service.act(mail_id, act, OpContext(actor=actor), group=group)
            log.info(
                "operator action",
                extra={"action": act.value, "mail_id": mail_id, "recipients": result.recipients},
            )
            return Reply(200, result.to_json())

        return self._guard(run)

    # ------------------------------------------------------------------ jobs
    def start_job(self, body: bytes | str | None, actor: str) -> Reply:
        def run() -> Reply:
            doc = _json_object(body)
            unknown = sorted(set(doc) - JOB_FIELDS)
            if unknown:
                raise InvalidInput("unknown_field", f"unknown field {unknown[0]!r}", unknown[0])
            if not isinstance(doc.get("action"), str):
                raise InvalidInput("missing_field", "action is required", "action")
            act = _action(doc["action"])
            raw = doc.get("filter") or {}
            if not isinstance(raw, dict):
                raise InvalidInput("invalid_type", "filter must be an object", "filter")
            params: dict[str, str | None] = {}
            for k, v in raw.items():
                if k not in FILTER_KEYS:
                    raise InvalidInput("unknown_parameter", f"unknown filter {k!r}", k)
                if isinstance(v, bool) or not isinstance(v, str | int):
                    raise InvalidInput("invalid_type", f"{k} must be a string or a number", k)
                params[k] = str(v)
            everything = doc.get("all", False)
            if not isinstance(everything, bool):
                raise InvalidInput("invalid_type", "all must be true or false", "all")
            job = self.service.start_job(
                act, parse_filter(params), actor=actor, everything=everything
            )
            self.launcher.launch(job.job_id)
            job = self.service.get_job(job.job_id)
            return Reply(202, job.to_json(), {"Location": f"/v1/queue/jobs/{job.job_id}"})

        return self._guard(run)

    def get_job(self, job_id: str) -> Reply:
        def run() -> Reply:
            job = self.service.get_job(job_id)
            if self.service.job_stalled(job):
                self.launcher.launch(job_id)  # nobody is working on it: resume
                job = self.service.get_job(job_id)
            return Reply(200, job.to_json())

        return self._guard(run)

    def cancel_job(self, job_id: str, actor: str) -> Reply:
        def run() -> Reply:
            job = self.service.cancel_job(job_id)
            log.info("job cancel", extra={"job": job_id, "state": job.state})
            return Reply(200, job.to_json())

        return self._guard(run)

    def doctor(self, params: Mapping[str, str | None]) -> Reply:
        def run() -> Reply:
            _only(params, frozenset())
            if self._doctor is None:  # the composition root gives it (compose.admin)
                return _error(501, "not_configured", "no DNS checks in this deployment")
            try:
                return Reply(200, self._doctor())
            except ConfigError as e:  # our settings, not the caller's input
                log.error("doctor misconfigured: %s", e)
                return _error(500, "misconfigured", str(e))

        return self._guard(run)


def _json_object(body: bytes | str | None) -> dict[str, Any]:
    """The request's JSON object, read as ingress reads it (one reader for both APIs):
    depth, encoding, duplicate keys and control characters in keys answer 400."""
    return parse_body(body)


_Route = Callable[[AdminApi, dict[str, str], Mapping[str, str | None], bytes | None, str], Reply]
_ROUTES: tuple[tuple[str, re.Pattern[str], _Route], ...] = (
    ("GET", re.compile(r"/v1/queue/mails"), lambda a, m, q, b, u: a.browse(q)),
    (
        "GET",
        re.compile(r"/v1/queue/mails/(?P<mail_id>[^/]+)"),
        lambda a, m, q, b, u: a.inspect(m["mail_id"], q),
    ),
    (
        "DELETE",
        re.compile(r"/v1/queue/mails/(?P<mail_id>[^/]+)"),
        lambda a, m, q, b, u: a.act(m["mail_id"], "delete", q, u),
    ),
    (
        "POST",
        re.compile(r"/v1/queue/mails/(?P<mail_id>[^/]+)/(?P<action>[^/]+)"),
        lambda a, m, q, b, u: a.act(m["mail_id"], m["action"], q, u),
    ),
    ("GET", re.compile(r"/v1/queue/size"), lambda a, m, q, b, u: a.size(q)),
    ("GET", re.compile(r"/v1/queue/shape"), lambda a, m, q, b, u: a.shape(q)),
    ("POST", re.compile(r"/v1/queue/jobs"), lambda a, m, q, b, u: a.start_job(b, u)),
    (
        "GET",
        re.compile(r"/v1/queue/jobs/(?P<job_id>[^/]+)"),
        lambda a, m, q, b, u: a.get_job(m["job_id"]),
    ),
    (
        "POST",
        re.compile(r"/v1/queue/jobs/(?P<job_id>[^/]+)/cancel"),
        lambda a, m, q, b, u: a.cancel_job(m["job_id"], u),
    ),
    ("GET", re.compile(r"/v1/queue/doctor"), lambda a, m, q, b, u: a.doctor(q)),
    (
        "GET",
        re.compile(r"/v1/queue/suspensions"),
        lambda a, m, q, b, u: a.suspension("list", m, q, b, u),
    ),
    (
        "POST",
        re.compile(r"/v1/queue/suspensions"),
        lambda a, m, q, b, u: a.suspension("suspend", m, q, b, u),
    ),
    (
        "DELETE",
        re.compile(r"/v1/queue/suspensions/(?P<scope>[^/]+)/(?P<target>[^/]+)"),
        lambda a, m, q, b, u: a.suspension("resume", m, q, b, u),
    ),
    ("GET", re.compile(r"/v1/queue/pools"), lambda a, m, q, b, u: a.pools(None)),
    (
        "GET",
        re.compile(r"/v1/queue/pools/(?P<pool>[^/]+)"),
        lambda a, m, q, b, u: a.pools(m["pool"]),
    ),
    (
        "GET",
        re.compile(r"/v1/queue/reputation/(?P<scope>[^/]+)/(?P<target>[^/]+)"),
        lambda a, m, q, b, u: a.reputation("show", m, b, u),
    ),
    (
        "POST",
        re.compile(r"/v1/queue/reputation/(?P<scope>[^/]+)/(?P<target>[^/]+)/resume"),
        lambda a, m, q, b, u: a.reputation("resume", m, b, u),
    ),
    (
        "GET",
        re.compile(r"/v1/queue/suppressions"),
        lambda a, m, q, b, u: a.suppression("list", None, q, b, u),
    ),
    (
        "POST",
        re.compile(r"/v1/queue/suppressions"),
        lambda a, m, q, b, u: a.suppression("add", None, q, b, u),
    ),
    (
        "GET",
        re.compile(r"/v1/queue/suppressions/(?P<address>[^/]+)"),
        lambda a, m, q, b, u: a.suppression("get", m["address"], q, b, u),
    ),
    (
        "DELETE",
        re.compile(r"/v1/queue/suppressions/(?P<address>[^/]+)"),
        lambda a, m, q, b, u: a.suppression("remove", m["address"], q, b, u),
    ),
)


def dispatch(
    api: AdminApi,
    method: str,
    path: str,
    query: Mapping[str, str | None],
    body: bytes | None,
    actor: str,
) -> Reply:
    """The API's routes without HTTP: the CLI's --local mode (the Lambda uses Powertools
    with the same routes, see functions/admin/app.py)."""
    for verb, pattern, route in _ROUTES:
        m = pattern.fullmatch(path)
        if m and verb == method.upper():
            return route(api, m.groupdict(), query, body, actor)
    return _error(404, "not_found", "no such route")
