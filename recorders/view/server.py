"""The web server of `gatetrace view`: a small Starlette app over one recording, read-only.

    GET /                          the page (static/index.html), its script and style
    GET /static/plotly.min.js      Plotly's JavaScript, from the installed `plotly` package
    GET /api/overview              `data.overview`
    GET /api/heatmap?cell=&label=&kind=gate|state&column=&example=
    GET /api/unit?cell=&gate=&unit=&example=&column=
    GET /api/select?cell=&label=&kind=&column=&example=&start=&stop=&threshold=&outside=0|1
    GET /api/match?cell=&label=&kind=&column=&units=3,7&threshold=&length=&k=&from=
    GET /api/parts?cell=&gate=&example=&step=
    GET /api/ranked?k=                              (served with labels to score units against)
    GET /api/labelled?cell=&table=gates|states&name=&column=&unit=&example=

Every parameter is parsed into its type and checked against the recording (cells, gates,
states and columns it holds) before anything is read; queries are built by `data` from
those values, never from text the page sends. A bad parameter gets a 400 with a JSON
`error`, a question the recording's files cannot answer (a damaged or edited file, see
`recorders.read.reader`) a 422, one that needs more memory than the reader's budget a 400 (a
MemoryError, a 503) saying what works, a path outside the page's own files a 404: never a traceback. Every
answer is JSON as the standard has it: a number it has no word for (an infinite or NaN value,
which recordings may hold) is sent as text, "inf", "-inf" or "nan" (`data.json_ready`). Nothing is served
but the page's files and answers about the recording. Everything ships in the installed
packages: the page needs no internet.

A server on 127.0.0.1 can still be reached by any web page the user visits, through DNS
rebinding (a name of the attacker's that resolves to 127.0.0.1): every request's `Host`
header must name one of `hosts` (Starlette's `TrustedHostMiddleware`, 400 otherwise), and no
CORS header is ever sent, so no other origin may read an answer. Bound to another address,
the server also requires `token`, as Jupyter does: `?token=` in the URL that `serve`
prints, which sets a same-site cookie for the page's own requests; without it, a 403.

Every answer comes within a second whatever the recording's size. A match scans the sequences
in example order for `data.MATCH_SECONDS` (or until it has found `k`) and answers those it
scanned, with the example to go on `from`. The units ranked against labels are scored in the
background from the view's start (`_Scoring`): until every unit is scored, `/api/ranked`
answers at once how far it is (`done`: false, the units scored of all); then the ranking. A
scoring that failed answers its error, one line, as any other answer does.
"""

from __future__ import annotations

import functools
import math
import secrets
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from recorders.errors import GatetraceError, MemoryBudgetError, RecordingError, SelectionError
from recorders.read.compare import Comparison
from recorders.read.labels import Labels as UnitLabels
from recorders.read.reader import Recording
from recorders.read.series import Series
from recorders.read.units import unit_scores
from recorders.view import data
from recorders.view import labelled as with_labels

__all__ = ["make_app", "STATIC", "LOOPBACK_HOSTS"]

# the names a browser on this machine uses for the default address
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
_COOKIE = "gatetrace_view_token"

STATIC = Path(__file__).resolve().parent / "static"
_PAGE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


# what a reader short of memory can do about an answer of the view
_MORE_MEMORY = (
    "the view reads within half the memory available when it started (its memory budget): close "
    "other programs and start it again, or read this in Python with Recording(path, memory=...)"
)


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


class _Params:
    """The query's parameters, each parsed into its type: a bad one raises SelectionError naming it."""

    def __init__(self, query):
        self.query = query

    def text(self, name: str, default: str | None = None) -> str:
        value = self.query.get(name, default)
        if value is None or value == "":
            raise SelectionError(f"parameter {name!r} is missing")
        return value

    def _converted(self, name: str, default, convert: Callable[[str], Any], what: str):
        """The parameter `name` converted (or `default` when it is absent and there is one)."""
        raw = self.query.get(name)
        if raw is None and default is not None:
            return default
        try:
            return convert(self.text(name))
        except ValueError:
            raise SelectionError(f"parameter {name!r}: expected {what}, given {raw!r}") from None

    def integer(
        self, name: str, default: int | None = None, low: int = 0, high: int = 10**12
    ) -> int:
        value = self._converted(name, default, int, "an integer")
        if not low <= value <= high:
            raise SelectionError(f"parameter {name!r}: expected {low} to {high}, given {value}")
        return value

    def number(self, name: str, default: float | None = None) -> float:
        value = self._converted(name, default, float, "a number")
        if not math.isfinite(value):
            raise SelectionError(
                f"parameter {name!r}: expected a finite number, given {self.query.get(name)!r}"
            )
        return value

    def choice(self, name: str, options: tuple[str, ...], default: str) -> str:
        value = self.query.get(name, default)
        if value not in options:
            raise SelectionError(
                f"parameter {name!r}: expected one of {', '.join(options)}, given {value!r}"
            )
        return value

    def integers(self, name: str, limit: int = 4096) -> list[int]:
        raw = self.text(name)
        try:
            values = [int(v) for v in raw.split(",") if v.strip()]
        except ValueError:
            raise SelectionError(
                f"parameter {name!r}: expected integers separated by commas, given {raw!r}"
            ) from None
        if not values or len(values) > limit or min(values) < 0:
            raise SelectionError(
                f"parameter {name!r}: expected 1 to {limit} non-negative integers, given {raw!r}"
            )
        return values


class _TokenGate:
    """ASGI middleware: a request passes with the token as `?token=` (its answer then sets the
    cookie) or as the cookie; any other gets a 403 with a JSON error."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send):
        from starlette.requests import Request
        from starlette.responses import JSONResponse

        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        given = request.query_params.get("token")
        if not secrets.compare_digest(
            (given or request.cookies.get(_COOKIE) or "").encode(), self.token.encode()
        ):
            error = "this view needs its token: open the URL that gatetrace view printed (it ends in ?token=...)"
            return await JSONResponse({"error": error}, status_code=403)(scope, receive, send)
        if given is None:
            return await self.app(scope, receive, send)

        async def with_cookie(message):
            if message["type"] == "http.response.start":
                cookie = f"{_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (b"set-cookie", cookie)],
                }
            await send(message)

        return await self.app(scope, receive, with_cookie)


def _in_background(work: Callable[[], Any]) -> Future:
    """`work()` run on a daemon thread (the server's end does not wait for it): its result, or
    its exception, in the Future returned."""
    done: Future = Future()

    def run() -> None:
        try:
            done.set_result(work())
        except BaseException as err:  # handed to whoever asks for the result
            done.set_exception(err)

    threading.Thread(target=run, daemon=True, name="gatetrace-view-scores").start()
    return done


class _Scoring:
    """Every unit of `rec` being scored against `labels` in the background (`unit_scores`), and
    how far it is: the units scored of all (a gate's unit once per column), since when."""

    def __init__(self, rec: Recording, labels: UnitLabels):
        self.scored: int = 0
        self.units: int | None = None
        self.began = time.monotonic()
        self.scores = _in_background(lambda: unit_scores(rec, labels, progress=self._advance))

    def _advance(self, scored: int, units: int) -> None:
        self.scored, self.units = scored, units

    def progress(self) -> dict[str, Any]:
        """How far the scoring is: `units` null until the labels are checked."""
        return {
            "scored": self.scored,
            "units": self.units,
            "seconds": round(time.monotonic() - self.began, 1),
        }


def make_app(
    rec: Recording,
    labels: data.Labels | None = None,
    *,
    hosts: tuple[str, ...] = LOOPBACK_HOSTS,
    token: str | None = None,
    series: Series | None = None,
    unit_labels: UnitLabels | None = None,
    comparison: Comparison | None = None,
):
    """The Starlette app serving `rec` (and step labels, if given), answering only requests
    whose `Host` is one of `hosts` and, with `token`, that carry it. With `series`, every
    request may name the key's value (`at`) whose recording answers it (default: `rec`). With
    `unit_labels` (`recorders.read.labels`), the units ranked against them and each step's label.
    With `comparison` (`recorders.read.compare`, of `rec` against another recording), its panel."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Route

    class Answer(JSONResponse):
        """JSON as the standard has it: infinities and NaN as text (`data.json_ready`)."""

        def render(self, content: Any) -> bytes:
            return super().render(data.json_ready(content))

    columns = ("preactivation", "activation", *(data.PARTS if rec.has_parts() else ()))
    opened: dict[int, Recording] = {}

    shown = series.complete[-1] if series is not None else -1  # the value `rec` is of

    def pick(p: _Params) -> Recording:
        """The recording a request asks for: `at` a value of the series' key, or `rec`."""
        if series is None:
            return rec
        at = p.integer("at", shown, -1)
        if at == shown:
            return rec
        if at not in series.complete:
            raise SelectionError(
                f"at={at}: the series holds {series.key} {', '.join(map(str, series.complete))}"
            )
        if at not in opened:
            opened[at] = series.recording(at)
        return opened[at]

    kinds = ("gate", "state")

    def api(answer: Callable[[_Params], dict[str, Any]]):
        async def endpoint(request):
            try:
                return Answer(answer(_Params(request.query_params)))
            # the recording's files cannot answer it (damaged, edited)
            except RecordingError as err:
                return JSONResponse({"error": str(err)}, status_code=422)
            # what works here: the view selects as little as it can already
            except MemoryBudgetError as err:
                return JSONResponse({"error": str(err.advised(_MORE_MEMORY))}, status_code=400)
            except MemoryError:
                error = f"out of memory answering this: {_MORE_MEMORY}"
                return JSONResponse({"error": error}, status_code=503)
            except (GatetraceError, ValueError, KeyError) as err:
                message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
                return JSONResponse({"error": str(message)}, status_code=400)
            # a defect of gatetrace's: one line in the server's output, no traceback
            except Exception as err:
                print(
                    f"gatetrace view: {request.url.path} failed: {type(err).__name__}: {err}",
                    file=sys.stderr,
                )
                return JSONResponse(
                    {
                        "error": f"gatetrace failed to answer ({type(err).__name__}); please report it"
                    },
                    status_code=500,
                )

        return endpoint

    def heatmap(p: _Params) -> dict:
        h = data.heatmap(
            pick(p),
            p.text("cell"),
            p.text("label"),
            p.integer("example"),
            p.choice("kind", kinds, "gate"),
            p.choice("column", columns, "activation"),
            labels,
        )
        key = (id(pick(p)), h["cell"], h["label"], h["kind"], h["column"])
        if key not in scales:  # fixed for every sequence: read once
            scales[key] = data.scale(pick(p), h["cell"], h["label"], h["kind"], h["column"])
        h["scale"] = scales[key]
        if unit_labels is not None:
            h["label_track"] = with_labels.label_track(unit_labels, h["example"], h["steps"])
            h["label_range"] = with_labels.label_range(unit_labels)
        return h

    scales: dict[tuple[int, str, str, str, str], dict[str, Any]] = {}

    def scoring() -> UnitLabels:
        if unit_labels is None:
            raise SelectionError("no labels: serve with gatetrace view RUN --labels FILE")
        return unit_labels

    ranked_cache: dict[tuple[int, int], dict[str, Any]] = {}
    # every unit scored against the labels, a recording (a value of the series) at a time: the
    # shown one's from the start, in the background (seconds on 100M rows, minutes on a
    # billion), so that the units panel answers at once when asked, or says how far it is
    scored: dict[int, _Scoring] = {}
    if unit_labels is not None:
        scored[shown] = _Scoring(rec, unit_labels)

    def ranked(p: _Params) -> dict:
        key = (
            p.integer("at", shown, -1) if series is not None else shown,
            p.integer("k", 20, 1, 1000),
        )
        if key not in ranked_cache:
            labels_ = scoring()
            if key[0] not in scored:
                scored[key[0]] = _Scoring(pick(p), labels_)
            running = scored[key[0]]
            if not running.scores.done():
                return {
                    "done": False,
                    "labels": labels_.source,
                    "metric": "auc" if labels_.binary else "pearson",
                    "progress": running.progress(),
                }
            answer = with_labels.ranked(pick(p), labels_, key[1], running.scores.result())
            ranked_cache[key] = {"done": True, **answer}
        return ranked_cache[key]

    def labelled(p: _Params) -> dict:
        table = p.choice("table", ("gates", "states"), "gates")
        return with_labels.labelled_course(
            pick(p),
            scoring(),
            p.text("cell"),
            table,
            p.text("name"),
            p.choice(
                "column",
                columns if table == "gates" else ("value",),
                "activation" if table == "gates" else "value",
            ),
            p.integer("unit"),
            p.integer("example"),
        )

    def unit(p: _Params) -> dict:
        return data.unit(
            pick(p),
            p.text("cell"),
            p.text("gate"),
            p.integer("unit"),
            p.integer("example"),
            p.choice("column", columns, "activation"),
            p.integer("k", 10, 1, 1000),
        )

    def select(p: _Params) -> dict:
        return data.select(
            pick(p),
            p.text("cell"),
            p.text("label"),
            p.integer("example"),
            p.integer("start"),
            p.integer("stop"),
            p.number("threshold"),
            p.choice("kind", kinds, "gate"),
            p.choice("column", columns, "activation"),
            p.choice("outside", ("0", "1"), "0") == "1",
        )

    def match(p: _Params) -> dict:
        return data.match(
            pick(p),
            p.text("cell"),
            p.text("label"),
            p.integers("units"),
            p.number("threshold"),
            p.integer("length", 1, 1),
            p.choice("kind", kinds, "gate"),
            p.choice("column", columns, "activation"),
            p.integer("k", 20, 1, 1000),
            p.integer("from", 0),
        )

    def parts(p: _Params) -> dict:
        return data.parts(
            pick(p), p.text("cell"), p.text("gate"), p.integer("example"), p.integer("step")
        )

    overview_cache: dict[int, dict[str, Any]] = {}

    @functools.cache
    def along(series: Series) -> dict[str, Any]:  # the gates along the series, read once
        return data.across(series, shown)

    def overview(p: _Params) -> dict:
        at = p.integer("at", shown, -1) if series is not None else shown
        if at not in overview_cache:
            overview_cache[at] = data.overview(pick(p))
            if series is not None:  # whichever value is shown
                overview_cache[at]["series"] = {**along(series), "at": at}
        return {
            **overview_cache[at],
            "tokens": labels is not None,
            "unit_labels": None if unit_labels is None else unit_labels.source,
            "compare": None if comparison is None else comparison.b,
        }

    def compare_answer(p: _Params) -> dict:
        if comparison is None:
            raise SelectionError("no comparison: serve with gatetrace view RUN --compare OTHER_RUN")
        return data.compared(comparison)

    def page_file(name: str):
        if name not in _PAGE_FILES:
            return Response("not found", status_code=404, media_type="text/plain")
        return FileResponse(STATIC / name, media_type=_PAGE_FILES[name])

    async def page(request):
        return page_file(request.path_params.get("name", "index.html"))

    async def plotly_js(request):
        return FileResponse(_plotly_js(), media_type="text/javascript; charset=utf-8")

    async def not_found(request, exc):
        return Response("not found", status_code=404, media_type="text/plain")

    routes = [
        Route("/", page),
        Route("/static/plotly.min.js", plotly_js),
        Route("/favicon.ico", lambda request: page_file("favicon.svg")),
        Route("/static/{name}", page),
        Route("/api/overview", api(overview)),
        Route("/api/heatmap", api(heatmap)),
        Route("/api/unit", api(unit)),
        Route("/api/select", api(select)),
        Route("/api/match", api(match)),
        Route("/api/parts", api(parts)),
        Route("/api/ranked", api(ranked)),
        Route("/api/labelled", api(labelled)),
        Route("/api/compare", api(compare_answer)),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts), www_redirect=False)]
    if token is not None:
        middleware.append(Middleware(_TokenGate, token=token))
    return Starlette(routes=routes, middleware=middleware, exception_handlers={404: not_found})
