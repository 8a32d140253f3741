"""The shell glue of the egress proxy's two containers: in the proxy's, the run's CA (for
secrets), Squid, and socat from the Unix sockets of the shared volume to Squid's ports; in the
agent's, socat from 127.0.0.1 ports to those sockets and the CA bundle its tools trust. Nothing
here starts anything: `proxy` gives these scripts to the containers it creates.
"""

from __future__ import annotations

from typing import NamedTuple

from sandbox_runner.backends.docker.egress.metering import (
    METER_BUDGET,
    METER_CONFIG,
    METER_PORT,
    METER_SCRIPT,
)
from sandbox_runner.backends.docker.egress.squid import (
    ACCESS_LOG,
    CA_DIR,
    CA_PEM,
    CACHE_LOG,
    CERT_DB,
    ERROR_PAGES_SCRIPT,
    FORWARD_PORT,
)
from sandbox_runner.backends.docker.egress.upstream import API_KINDS, Kind

SOCKET_DIR = "/fks-proxy"
FORWARD_SOCKET = f"{SOCKET_DIR}/proxy.sock"
API_SOCKET = f"{SOCKET_DIR}/api.sock"  # Anthropic's; another API's is api-<kind>.sock
SQUID_CONF = "/etc/fks-squid.conf"  # in /etc: put_archive needs an existing directory
RUN_CA = f"{SOCKET_DIR}/ca.crt"
"""The run's CA certificate (not its key), for the agent to trust: in the socket volume."""
CA_BUNDLE = "/tmp/fks-ca-bundle.pem"
"""In the agent's container: its image's trusted CAs and the run's, made when it starts."""
CA_VARIABLES = (
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
)
"""What the agent's tools read for a CA bundle; NODE_EXTRA_CA_CERTS (added to Node's own)
gets the run's CA alone."""
_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)
READY_LINE = "fks-proxy ready"


def _listening(port: int) -> str:
    """A test that 127.0.0.1:`port` is listening (no nc/ss in the images: /proc/net/tcp)."""
    return f"grep -q ' 0100007F:{port:04X} 00000000:0000 0A ' /proc/net/tcp"


def _forwarding(port: int) -> str:
    """`_listening`, in an agent's container. Under gVisor a container lists only its own
    sockets there, not those of the container whose network namespace it joined: then a
    connection that sends nothing tells."""
    return f"{{ {_listening(port)} || socat -u OPEN:/dev/null TCP:127.0.0.1:{port} 2>/dev/null; }}"


class Glue(NamedTuple):
    """What the shell glue of both containers sets up besides the allow-list proxy."""

    apis: tuple[Kind, ...] = ()
    """The model APIs' ports, by kind."""
    ca: bool = False
    """The run's CA (for secrets): made by the proxy, trusted by the agent."""
    meter: bool = False
    """The meter behind the API ports (mitmproxy), started beside Squid."""


METER_DIR = "/dev/shm/fks-meter"  # mitmproxy's own directory (its unused CA among it)


def _meter_script(glue: Glue) -> str:
    """The meter in the background, its lines on the container's output (the host reads
    them); Squid waits for it no longer than for itself. `-I`: the script's folder (/etc)
    is not on its import path, nor do PYTHON* variables count."""
    if not glue.meter:
        return ""
    return (
        f"FKS_METER_CONFIG={METER_CONFIG} FKS_METER_BUDGET={METER_BUDGET} "
        f"python3 -I {METER_SCRIPT} {METER_PORT} {METER_DIR} 2>&1 & meter=$!; "
        # Squid starts once it listens: a peer Squid found down is not asked at first.
        f'until {_listening(METER_PORT)}; do kill -0 "$meter" 2>/dev/null || exit 1; '
        "sleep 0.02; done; "
    )


def _make_ca(run_id: str) -> str:
    """The run's CA: key and certificate in CA_DIR (the proxy user's only), the certificate
    copied to RUN_CA for the agent; Squid's certificate database made empty."""
    subject = f"/O=fks/CN=fks egress proxy CA for run {run_id}"
    return (
        f"(umask 077 && mkdir -p {CA_DIR} && "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 "
        f"-keyout {CA_DIR}/key.pem -out {CA_DIR}/cert.pem -subj '{subject}' "
        "-addext 'basicConstraints=critical,CA:TRUE,pathlen:0' "
        "-addext 'keyUsage=critical,keyCertSign,cRLSign' 2>/dev/null && "
        f"cat {CA_DIR}/key.pem {CA_DIR}/cert.pem > {CA_PEM} && "
        f"/usr/lib/squid/security_file_certgen -c -s {CERT_DB} -M 4MB >/dev/null) || "
        "{ echo 'fks: could not make the run CA (openssl)' >&2; exit 1; }; "
        f"cp {CA_DIR}/cert.pem {RUN_CA}.new && chmod 0644 {RUN_CA}.new && mv {RUN_CA}.new {RUN_CA}; "
    )


def proxy_script(glue: Glue, run_id: str) -> str:
    """Squid, then (once it listens) socat from the Unix sockets to it, then READY_LINE."""
    pairs = _pairs(glue)
    listening = " && ".join(_listening(port) for _, port in pairs)
    sockets = " && ".join(f"[ -S {path} ]" for path, _ in pairs)
    forwarders = "".join(
        f"socat UNIX-LISTEN:{path},fork,mode=666,unlink-early TCP:127.0.0.1:{port} & "
        for path, port in pairs
    )
    return (
        f"{ERROR_PAGES_SCRIPT}; "
        f"{_make_ca(run_id) if glue.ca else ''}"
        f"(: >> {ACCESS_LOG}) 2>/dev/null; "  # before tail follows it (a missing file is polled slowly)
        f"{_meter_script(glue)}"
        f"squid -N -f {SQUID_CONF} & squid=$!; "
        f"until {listening}; do "
        f'kill -0 "$squid" 2>/dev/null || {{ tail -n 20 {CACHE_LOG} >&2; exit 1; }}; '
        "sleep 0.02; done; "
        f"{forwarders}"
        f"until {sockets}; do sleep 0.01; done; "
        # The access log on the container's output, where fks follows it (no call per iteration).
        f"tail -s 0.05 -n +1 -F {ACCESS_LOG} 2>/dev/null & "
        f"echo '{READY_LINE}'; wait"
    )


def agent_script(glue: Glue) -> str:
    """socat from 127.0.0.1 ports to the proxy's sockets, in the background; once they listen,
    exec the agent's argv ("$@")."""
    forwarders = "".join(
        f"socat TCP-LISTEN:{port},fork,bind=127.0.0.1,reuseaddr UNIX-CONNECT:{path} & "
        for path, port in _pairs(glue)
    )
    return wait_script(glue, starting=forwarders)


def _trust_script() -> str:
    """CA_BUNDLE: the image's trusted CAs (the first bundle found), then the run's CA (once the
    proxy, which may be starting beside this container, made it)."""
    bundles = " ".join(_SYSTEM_BUNDLES)
    return (
        f"i=0; until [ -f {RUN_CA} ]; do i=$((i + 1)); "
        "[ $i -le 20000 ] || { echo 'fks: the egress proxy did not start' >&2; exit 125; }; "
        "sleep 0.02; done; "
        f'for b in {bundles}; do [ -f "$b" ] && {{ cat "$b"; break; }}; done > {CA_BUNDLE} && '
        f"cat {RUN_CA} >> {CA_BUNDLE} || "
        "{ echo 'fks: could not trust the egress proxy CA' >&2; exit 125; }; "
    )


def wait_script(glue: Glue, starting: str = "") -> str:
    """Run `starting` (the forwarders, or nothing: someone else starts them), wait until the
    forwarders listen, then exec "$@". socat is checked either way: the forwarders run it, in
    this image (a step's containers share it)."""
    listening = " && ".join(_forwarding(port) for _, port in _pairs(glue))
    return (
        "command -v socat >/dev/null || "
        "{ echo 'fks: socat is not in the image; the egress proxy needs it' >&2; exit 127; }; "
        f"{_trust_script() if glue.ca else ''}"
        f"{starting}"
        f"i=0; until {listening}; do i=$((i + 1)); "
        "[ $i -lt 500 ] || { echo 'fks: the egress forwarder did not start' >&2; exit 125; }; "
        'sleep 0.01; done; exec "$@"'
    )


def _pairs(glue: Glue) -> list[tuple[str, int]]:
    """(socket, port) of each forwarder."""
    return [(FORWARD_SOCKET, FORWARD_PORT)] + [
        (api_socket(k), API_KINDS[k].port) for k in glue.apis
    ]


def proxy_sockets(glue: Glue) -> tuple[str, ...]:
    """The sockets the proxy makes, once it is ready."""
    return tuple(path for path, _ in _pairs(glue))


def api_socket(kind: Kind) -> str:
    """The socket of the API port of `kind` in the shared volume."""
    return API_SOCKET if kind == "anthropic" else f"{SOCKET_DIR}/api-{kind}.sock"
