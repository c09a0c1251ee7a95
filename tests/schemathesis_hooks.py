"""Schemathesis hooks for tests/system/test_api_schema.py, loaded through SCHEMATHESIS_HOOKS.

Two checks beyond schemathesis's own: every error is the API's JSON error shape, and every response is
written down (operation, generation mode, status) so the test can tell how many inputs were tried, of
which kind, against which operations. Half of the generated path parameters are swapped for a workflow
and an instance that exist, so the inputs reach the views' validation instead of stopping at a 404.
"""

import json
import os

import schemathesis
from hypothesis import strategies as st

from django_workflows.webhooks import sign

KNOWN = {"name": "approval", "instance_id": "a0", "event_type": "manager-approval"}
WEBHOOK_SECRET = "s3cret"  # WEBHOOK_SECRETS["approval"] and ["refund"] in the test


@schemathesis.hook
def flatmap_path_parameters(context, path_parameters):
    if not path_parameters:
        return st.just(path_parameters)
    known = {key: KNOWN[key] for key in path_parameters if key in KNOWN}
    # Keep what was generated for one of the parameters, so a hostile id reaches a real workflow.
    variants = [path_parameters, {**path_parameters, **known}]
    variants += [{**path_parameters, **{k: v for k, v in known.items() if k != keep}} for keep in known]
    return st.sampled_from(variants)


@schemathesis.hook
def map_case(context, case):
    """Sign half of the webhook bodies as a sender would, so that some get past the signature check
    (and reach the payload's validation and the refusal of a delivery posted twice)."""
    if not case.operation.path.endswith("/webhooks/{event_type}/") or isinstance(case.body, bytes):
        return case
    try:
        # What requests sends for a JSON body.
        body = b"null" if case.body is None else json.dumps(case.body, allow_nan=False).encode()
    except (TypeError, ValueError):
        return case
    if len(body) % 2 == 0:
        case.headers = {**(case.headers or {}), "X-Workflows-Signature": sign(WEBHOOK_SECRET, body)}
    return case


@schemathesis.check
def error_is_the_api_error_shape(ctx, response, case):
    """A 4xx or 5xx is JSON ``{"error": {"code": str, "message": str}}``, whatever the input was."""
    if response.status_code < 400:
        return None
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    assert content_type.startswith("application/json"), (
        f"{response.status_code} with Content-Type {content_type!r}: {response.content[:200]!r}")
    body = json.loads(response.content)
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict), f"no 'error' object in {body!r:.300}"
    assert isinstance(error.get("code"), str) and error["code"], f"no error code in {body!r:.300}"
    assert isinstance(error.get("message"), str) and error["message"], f"no error message in {body!r:.300}"
    return None


@schemathesis.check
def record_the_input(ctx, response, case):
    """One line per response in $DW_FUZZ_LOG: the operation, whether the input was valid, the status."""
    path = os.environ.get("DW_FUZZ_LOG")
    if path:
        meta = case.meta
        mode = meta.generation.mode.value if meta is not None else "explicit"
        line = {"operation": f"{case.operation.method.upper()} {case.operation.path}", "mode": mode,
                "status": response.status_code}
        with open(path, "a") as log:
            log.write(json.dumps(line) + "\n")
    return None
