"""schemathesis hooks for scripts/schemathesis.

- The spec's examples name `api.example.test`; requests are pointed at the loopback origin
  the script started instead, so examples reach a real upstream (LARDER_ORIGIN).
- `larder_never_fails_internally` replaces schemathesis's `not_a_server_error`: Larder answers
  5xx by design when an upstream fails (502 upstream_unreachable for a generated host that does
  not exist, 504 upstream_timeout), so the property checked is that every 5xx is one of the
  documented, named upstream or service errors (a JSON body with its code), and never a 500.
- `ast.parse` is serialised: with `--workers 2` two threads of Hypothesis describe filter
  lambdas at once, and CPython 3.11 keeps the AST constructor's recursion depth in state the
  threads share, so one of them may stop with "SystemError: AST constructor recursion depth
  mismatch" (CPython gh-106905) and end the run with a runtime error that says nothing about
  Larder (seen in CI)."""
import ast
import os
import threading

import schemathesis

ORIGIN = os.environ["LARDER_ORIGIN"]
EXAMPLE_HOST = "http://api.example.test"
NAMED_5XX = {
    "upstream_unreachable", "upstream_timeout", "upstream_too_large", "too_many_redirects", "upstream_error",
    "validation_failed", "not_cached", "not_implemented", "storage_failed", "shutting_down", "loop_detected"
}

_ast_parse = ast.parse
_ast_lock = threading.Lock()


def _serialised_ast_parse(*args, **kwargs):
    with _ast_lock:
        return _ast_parse(*args, **kwargs)


ast.parse = _serialised_ast_parse


def _to_origin(value):
    if isinstance(value, str):
        return value.replace(EXAMPLE_HOST, ORIGIN)
    if isinstance(value, list):
        return [_to_origin(item) for item in value]
    if isinstance(value, dict):
        return {key: _to_origin(item) for key, item in value.items()}
    return value


@schemathesis.hook
def before_call(ctx, case, kwargs):
    # Every phase, the spec's own examples included.
    case.body = _to_origin(case.body)
    if case.query:
        case.query = _to_origin(case.query)


@schemathesis.check
def larder_never_fails_internally(ctx, response, case):
    status = response.status_code
    if status < 500:
        return None
    if status == 500:
        raise AssertionError("500 Internal Server Error")
    try:
        code = response.json()["error"]["code"]
    except Exception:
        raise AssertionError(f"{status} without a JSON error body: {response.text[:200]!r}")
    if code not in NAMED_5XX:
        raise AssertionError(f"{status} with an undocumented error code {code!r}")
    return None

