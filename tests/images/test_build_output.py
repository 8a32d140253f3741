"""What `docker build` says, read: whole plain lines, the images its steps made, and a failure
as one line that names --ca-cert when a TLS certificate was not trusted."""

from __future__ import annotations

import re

import pytest

from sandbox_runner.errors import SandboxError
from sandbox_runner.images.build_output import BuildTrace, build_lines


def test_build_output_is_whole_plain_lines() -> None:
    events = [
        {"stream": "Step 1/2 : FROM x\n ---> abc"},
        {"stream": "\n\x1b[1mnpm\x1b[0m progress 10%\rprogress 100%\n"},
        {"status": "Downloading", "progress": "[==>  ]"},
        {"stream": "tail without newline"},
    ]
    lines = list(build_lines(events, plain=True))
    assert lines == [
        "Step 1/2 : FROM x",
        " ---> abc",
        "progress 100%",
        "Downloading [==>  ]",
        "tail without newline",
    ]
    assert not any(re.search(r"[\x00-\x08\x0b-\x1f\x7f]", line) for line in lines)


def test_build_error_event_raises_one_line() -> None:
    events = [
        {"stream": "Step 7/18 : RUN apt-get update\n"},
        {"error": "The command '/bin/sh -c apt-get update' returned a non-zero code: 100\n"},
    ]
    seen: list[str] = []
    with pytest.raises(SandboxError) as caught:
        seen.extend(build_lines(events, plain=True))
    assert seen == ["Step 7/18 : RUN apt-get update"]
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(
        "docker build failed: The command '/bin/sh -c apt-get update' returned a non-zero code: 100"
    )


def test_a_step_that_explains_itself_gives_the_error_line() -> None:
    """A build step's own `fks: …` line (stderr, in colour codes) is the error, not the command."""
    events = [
        {"stream": "Step 6/18 : RUN set -eu; ...\n"},
        {
            "stream": "\x1b[91mfks: img:1 has no apt-get; --from needs a Debian or Ubuntu based image\n"
        },
        {"stream": "\x1b[0mRemoving intermediate container bb2e79a52ab1\n"},
        {"errorDetail": {"code": 3}, "error": "The command '/bin/sh -c set -eu; ...' returned 3"},
    ]
    with pytest.raises(SandboxError) as caught:
        list(build_lines(events, plain=True))
    assert str(caught.value) == "img:1 has no apt-get; --from needs a Debian or Ubuntu based image"


UNTRUSTED = [
    "curl: (60) SSL certificate problem: self-signed certificate in certificate chain",
    "npm ERR! code SELF_SIGNED_CERT_IN_CHAIN",
    "fks: cannot fetch https://registry.npmjs.org/x: <urlopen error [SSL: CERTIFICATE_VERIFY_FAILED] "
    "certificate verify failed: self-signed certificate in certificate chain (_ssl.c:1006)>",
    "Err:1 https://deb.example bookworm InRelease  Certificate verification failed: The "
    "certificate is NOT trusted.",
    'Get "https://proxy.golang.org/x": tls: failed to verify certificate: x509: certificate '
    "signed by unknown authority",
    "pip: SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate "
    "verify failed: unable to get local issuer certificate'))",
]


@pytest.mark.parametrize("said", UNTRUSTED)
def test_an_untrusted_certificate_names_ca_cert_in_one_line(said: str) -> None:
    events = [
        {"stream": "Step 9/18 : RUN fetch\n"},
        {"stream": f"\x1b[91m{said}\n\x1b[0m"},
        {"stream": "\x1b[91mfks: something else went wrong\n\x1b[0m"},
        {"errorDetail": {"code": 1}, "error": "The command '/bin/sh -c fetch' returned 1"},
    ]
    with pytest.raises(SandboxError) as caught:
        list(build_lines(events, plain=True))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("docker build failed: ")
    assert " ".join(said.split())[:60] in message
    assert message.endswith(
        "a TLS certificate was not trusted; behind a TLS-intercepting proxy, pass its CA "
        "certificate with --ca-cert FILE (e.g. one of /usr/local/share/ca-certificates/*.crt)"
    )


def test_other_failures_do_not_blame_certificates() -> None:
    events = [
        {"stream": "Step 3/5 : RUN false\n"},
        {"stream": "ca-certificates is already the newest version\n"},
        {"error": "The command '/bin/sh -c false' returned a non-zero code: 1"},
    ]
    with pytest.raises(SandboxError) as caught:
        list(build_lines(events, plain=True))
    assert "not trusted" not in str(caught.value)


def test_the_trace_names_the_images_the_steps_made_not_cached_or_base_ones() -> None:
    events = [
        {"stream": "Step 1/4 : FROM base:1\n ---> aaaaaaaaaaaa\n"},
        {"stream": "Step 2/4 : RUN cached\n ---> Using cache\n ---> bbbbbbbbbbbb\n"},
        {"stream": "Step 3/4 : COPY x /x\n ---> cccccccccccc\n"},
        {"stream": "Step 4/4 : RUN made\n ---> Running in 0123456789ab\n"},
        {"stream": "Removing intermediate container 0123456789ab\n ---> dddddddddddd\n"},
        {"stream": "Successfully built dddddddddddd\n"},
    ]
    trace = BuildTrace()
    list(build_lines(events, plain=True, trace=trace))
    assert trace.made == ["cccccccccccc", "dddddddddddd"]
    assert trace.image == "dddddddddddd"
