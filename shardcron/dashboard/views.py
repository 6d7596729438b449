"""The pages and the actions. Every read and write goes through the node's API, in this process, as the visitor."""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import urlencode

import grpc
import yaml
from aiohttp import web

from shardcron import clock
from shardcron.api.tokens import secret_from_authorization
from shardcron.client.errors import ApiError
from shardcron.dashboard import guard, present
from shardcron.dashboard.guard import COOKIE, Visitor
from shardcron.dashboard.sessions import Session
from shardcron.errors import ShardcronError
from shardcron.jobkey import split_key
from shardcron.spec.durations import parse_time_ms
from shardcron.spec.job import job_to_dict

log = logging.getLogger(__name__)

JOBS_PAGE = 50
TICKS_SHOWN = 200
MISSED_LATELY_MS = 86_400_000  # the jobs page lists the jobs that missed a deadline this recently
MISSES_SHOWN = 1000  # the newest misses read for that list (a job is listed once)
STATUS_FILTERS = {"": None, "active": False, "paused": True}


class Pages:
    """aiohttp handlers over a ``Dashboard`` (server.py): its sessions, its node's API and templates."""

    def __init__(self, dashboard):
        self.d = dashboard

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.home),
            web.get("/login", self.login_form),
            web.post("/login", self.login),
            web.post("/logout", self.logout),
            web.get("/cluster", self.cluster),
            web.get("/jobs", self.jobs),
            web.get("/job", self.job),
            web.post("/job/{action}", self.act),
            web.get("/health", self.health),
            web.get("/health.json", self.health_json),
            web.get("/palette.css", self.palette),
        ]

    # -- who is asking ------------------------------------------------------------------

    def visitor(self, request: web.Request) -> Visitor | None:
        secret = guard.bearer_secret(request)
        if secret is not None:
            token = self.d.identify(secret)
            if token is None and self.d.checks_tokens:
                return None
            return Visitor(Session("", secret, token, csrf=""), by_bearer=True)  # kept nowhere
        session = self.d.sessions.find(request.cookies.get(COOKIE), time.monotonic())
        if session is None:
            return None
        if not self.still_known(session.secret):
            self.d.sessions.close(session.id)  # revoked since the login: the session ends with it
            return None
        return Visitor(session, by_bearer=False)

    def still_known(self, secret: str | None) -> bool:
        """Whether the node still knows this token (False once it is revoked); always, without tokens."""
        return not self.d.checks_tokens or self.d.identify(secret) is not None

    def signed_in(self, request: web.Request) -> Visitor:
        """The visitor, or an answer that stops here: the login form for a page, 401 for anything else."""
        v = self.visitor(request)
        if v is not None:
            return v
        if not self.d.checks_tokens:  # nothing to log in with: a session just for CSRF
            # A form of a page whose session has gone (idle, or the node restarted): redirected, it would come
            # back as a GET of an action (405), and a new session could not have its CSRF token anyway.
            if request.method not in ("GET", "HEAD"):
                raise web.HTTPForbidden(
                    text="this page's session has ended (idle too long, or the node restarted): "
                    "reload the page, then try again"
                )
            raise self._open_session_and_return(request, None, None, request.path_qs)
        if request.method == "GET" and "json" not in request.path and not request.path.startswith("/events/"):
            raise web.HTTPSeeOther("/login?" + urlencode({"next": request.path_qs}))
        raise web.HTTPUnauthorized(text="log in first (or send Authorization: Bearer <token>)")

    def checked_action(self, request: web.Request, form) -> Visitor:
        v = self.signed_in(request)
        csrf = _field_or_400(form, guard.CSRF_FIELD)
        if not v.by_bearer and not (guard.same_origin(request) and guard.csrf_ok(request, v.session, csrf)):
            raise web.HTTPForbidden(text="the request did not carry this session's CSRF token; reload the page")
        return v

    def _open_session_and_return(self, request, secret, token, target) -> web.HTTPSeeOther:
        session = self.d.sessions.open(secret, token, time.monotonic())
        answer = web.HTTPSeeOther(guard.local_path(target))
        answer.set_cookie(COOKIE, session.id, httponly=True, samesite="Strict", secure=self.d.tls, path="/")
        return answer

    # -- calling the API as the visitor ---------------------------------------------------

    async def call(self, v: Visitor, method: str, *args, **kwargs):
        """``Client.<method>(*args, **kwargs)``'s answer from the node's API in this process
        (``api.in_process.CallerApi``), as the visitor: the API's checks, limits, routing and audit, with no
        channel and no thread of its own."""
        return await self.d.api.as_caller(v.session.secret).call(method, *args, **kwargs)

    def render(self, request: web.Request, template: str, v: Visitor | None, status: int = 200, **context):
        html = self.d.templates.get_template(template).render(
            visitor=v,
            csrf=v.session.csrf if v else "",
            path=request.path,
            present=present,
            checks_tokens=self.d.checks_tokens,
            node=self.d.node_id,
            **context,
        )
        return web.Response(text=html, content_type="text/html", status=status)

    # -- pages ------------------------------------------------------------------------

    async def home(self, request):
        raise web.HTTPSeeOther("/cluster")

    async def login_form(self, request):
        if not self.d.checks_tokens:
            raise web.HTTPSeeOther(guard.local_path(request.query.get("next")))
        return self.render(request, "login.html", None, next=guard.local_path(request.query.get("next")), error=None)

    async def login(self, request):
        form = await request.post()
        target = guard.local_path(_field_or_400(form, "next"))
        if not guard.same_origin(request):
            raise web.HTTPForbidden(text="a login from another site is refused")
        secret = secret_from_authorization(_field_or_400(form, "token"))  # as the API reads it
        token = self.d.identify(secret) if secret else None
        if token is None:
            log.warning("dashboard: a login with an unknown token from %s was refused", request.remote)
            return self.render(
                request, "login.html", None, status=401, next=target, error="That token is not known to this cluster."
            )
        log.info("dashboard: token %r logged in from %s", token.name, request.remote)
        raise self._open_session_and_return(request, secret, token, target)

    async def logout(self, request):
        form = await request.post()
        v = self.checked_action(request, form)
        self.d.sessions.close(v.session.id)
        answer = web.HTTPSeeOther("/login")
        answer.del_cookie(COOKIE, path="/")
        raise answer

    async def cluster(self, request):
        v = self.signed_in(request)
        shard_map, error = await self.shard_map(v)
        return self.render(request, "cluster.html", v, map=shard_map, error=error)

    async def shard_map(self, v: Visitor) -> tuple[dict | None, str | None]:
        """The map as ``v`` may see it, or why not."""
        try:
            return await self.coloured_shard_map(v), None
        except ShardcronError as e:
            return None, str(e)

    async def coloured_shard_map(self, v: Visitor) -> dict:
        """GetShards as ``v``, with a colour for each node; a refusal or failure raises (ShardcronError)."""
        m = await self.call(v, "shards", timeout_s=10)
        m["colours"] = present.leader_colours(
            [n["node"] for n in m["nodes"]] + [s["leader"] for s in m["shards"] if s["leader"]]
        )
        return m

    async def jobs(self, request):
        v = self.signed_in(request)
        q = request.query
        filters = {
            "namespace": q.get("namespace", "*") or "*",
            "q": q.get("q", "").strip(),
            "label": q.get("label", "").strip(),
            "shard": q.get("shard", "").strip(),
            "status": q.get("status", ""),
        }
        error, rows, next_token = None, [], ""
        try:
            labels = _labels(filters["label"])
            shard = _shard(filters["shard"])
            if filters["status"] not in STATUS_FILTERS:
                raise ValueError(f"status: one of active or paused, got {filters['status']!r}")
            rows, next_token = await self.call(
                v,
                "job_page",
                page_token=q.get("page", ""),
                page_size=JOBS_PAGE,
                labels=labels,
                shard=shard,
                namespace=filters["namespace"],
                id_prefix=filters["q"],
                paused=STATUS_FILTERS[filters["status"]],
                timeout_s=10,
            )
        except (ValueError, ShardcronError) as e:
            error = str(e)
        namespaces = await self._namespace_names(v)
        missed = await self._missed_lately(v, filters["namespace"])
        keep = {k: val for k, val in filters.items() if val and not (k == "namespace" and val == "*")}
        context: dict[str, Any] = dict(
            rows=[(j, r, split_key(j.id)) for j, r in rows],
            filters=filters,
            error=error,
            next_url=("/jobs?" + urlencode({**keep, "page": next_token})) if next_token else None,
            first_url="/jobs?" + urlencode(keep) if q.get("page") else None,
            namespaces=namespaces,
            missed=missed,
        )
        if request.headers.get("HX-Request") and request.headers.get("HX-Target") == "job-table":
            return self.render(request, "_jobs.html", v, **context)
        return self.render(request, "jobs.html", v, **context)

    async def _missed_lately(self, v: Visitor, namespace: str) -> list[present.MissedSlot]:
        """The jobs that missed a deadline in the last ``MISSED_LATELY_MS``, across the cluster (of the
        namespace shown); none when the API refuses (the page's own error says why)."""
        try:
            since = clock.wall_ms() - MISSED_LATELY_MS
            misses = await self.call(v, "list_deadline_misses", since, limit=MISSES_SHOWN, namespace=namespace)
        except ShardcronError:
            return []
        return present.jobs_that_missed(misses)

    async def _namespace_names(self, v: Visitor) -> list[str]:
        try:
            return [n.name for n in await self.call(v, "list_namespaces", timeout_s=10)]
        except ShardcronError:
            return []

    async def job(self, request):
        v = self.signed_in(request)
        job_id, namespace = request.query.get("id", ""), request.query.get("namespace", "default")
        try:
            job, runs = await self.call(v, "get_job_runs", job_id, namespace=namespace, timeout_s=10)
            ticks = await self.call(v, "list_ticks", job_id, limit=TICKS_SHOWN, namespace=namespace)
        except ShardcronError as e:
            status = 404 if isinstance(e, ApiError) and e.code is grpc.StatusCode.NOT_FOUND else 200
            return self.render(
                request, "job.html", v, status=status, job=None, error=str(e), job_id=job_id, namespace=namespace
            )
        definition = yaml.safe_dump(job_to_dict(job), sort_keys=False, allow_unicode=True)
        points = [present.tick_point(t) for t in reversed(ticks)]
        return self.render(
            request,
            "job.html",
            v,
            job=job,
            runs=runs,
            ticks=ticks,
            definition=definition,
            points=points,
            job_id=job_id,
            namespace=namespace,
            error=None,
            events_url="/events/job?" + urlencode({"id": job_id, "namespace": namespace}),
        )

    async def act(self, request):
        """Pause, resume, trigger or backfill; the API decides (a read token is refused there)."""
        form = await request.post()
        v = self.checked_action(request, form)
        action = request.match_info["action"]
        job_id, namespace = "", "default"
        try:
            job_id, namespace = guard.field(form, "id"), guard.field(form, "namespace", "default")
            if action in ("pause", "resume"):
                await self.call(v, f"{action}_job", job_id, namespace=namespace, timeout_s=10)
                message = f"{job_id} {'paused' if action == 'pause' else 'resumed'}."
            elif action == "trigger":
                slot = await self.call(v, "trigger_job", job_id, namespace=namespace, timeout_s=10)
                message = f"{job_id} triggered: slot {present.utc(slot.scheduled_at_ms)}."
            elif action == "backfill":
                backfill = await self.call(
                    v,
                    "backfill_job",
                    job_id,
                    parse_time_ms(guard.field(form, "from"), field="from"),
                    parse_time_ms(guard.field(form, "to"), field="to"),
                    rate_per_s=_rate(guard.field(form, "rate")),
                    namespace=namespace,
                    timeout_s=10,
                )
                message = f"backfill {backfill.id} started: {backfill.planned} slots."
            else:
                raise web.HTTPNotFound(text=f"no action {action!r}: pause, resume, trigger or backfill")
            ok, status = True, 200
        except (ValueError, ShardcronError) as e:
            ok, message = False, str(e)
            status = 403 if isinstance(e, ApiError) and e.code is grpc.StatusCode.PERMISSION_DENIED else 400
        if request.headers.get("HX-Request"):  # htmx swaps only 2xx answers: the message says it failed
            answer = self.render(request, "_flash.html", v, ok=ok, message=message)
            if ok and action in ("pause", "resume"):
                answer.headers["HX-Trigger"] = "job-changed"
            return answer
        if ok and not v.by_bearer:  # a browser without script posted the form: back to the job's page
            raise web.HTTPSeeOther("/job?" + urlencode({"namespace": namespace, "id": job_id}))
        return self.render(request, "_flash.html", v, status=status, ok=ok, message=message)

    async def palette(self, request):
        return web.Response(
            text=present.palette_css(), content_type="text/css", headers={"Cache-Control": "max-age=3600"}
        )

    async def health(self, request):
        v = self.signed_in(request)
        return self.render(request, "health.html", v)

    async def health_json(self, request):
        self.signed_in(request)
        return web.json_response(self.d.history.series())


def _field_or_400(values, name: str) -> str:
    """``guard.field``, or a 400 answer naming the field."""
    try:
        return guard.field(values, name)
    except guard.FieldTooLong as e:
        raise web.HTTPBadRequest(text=str(e)) from None


def _labels(text: str) -> dict[str, str] | None:
    if not text:
        return None
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"label: write key=value (several: a=1,b=2), got {part!r}")
        out[key.strip()] = value.strip()
    return out


def _shard(text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"shard: a shard number, got {text!r}")
    return int(text)


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise ValueError(f"rate: slots per second, a number above 0, got {text!r}") from None
    if not rate > 0:
        raise ValueError(f"rate: slots per second, a number above 0, got {text!r}")
    return rate
