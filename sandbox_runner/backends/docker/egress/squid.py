"""Squid's configuration for the egress proxy: the allow-list forward proxy and the model API
accelerator, which passes only the API calls Claude Code makes and puts the real credential on
them. Nothing here starts anything; `egress` puts the text into the proxy container.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sandbox_runner.plan.allow import AllowEntry


class ApiUpstream(Protocol):
    """What the accelerator needs of the model API (`egress.ApiUpstream` is one)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def tls(self) -> bool: ...
    @property
    def header(self) -> str: ...
    @property
    def credential(self) -> str: ...


FORWARD_PORT = 3128  # on 127.0.0.1 in both containers: the allow-list proxy
API_PORT = 8080  # on 127.0.0.1 in both containers: the model API, credential added
ACCESS_LOG = "/var/log/squid/access.log"
CACHE_LOG = "/var/log/squid/cache.log"
ERROR_DIR = "/dev/shm/fks-squid-errors"
"""Squid's error pages, made by `ERROR_PAGES_SCRIPT`: one line naming the error, nothing of
the request (the stock pages show its URL and headers). In memory: making 40-odd files in the
container's own file system adds ~0.1 s to the proxy's start."""
_REFUSED = (
    "fks egress proxy: ERR_ACCESS_DENIED: refused; only the run's allowed hosts (sandbox.allow, "
    "--allow) and the model API's calls go through"
)
ERROR_PAGES_SCRIPT = (
    f"mkdir -p {ERROR_DIR} && for page in /usr/share/squid/errors/templates/ERR_*; do "
    f'name=${{page##*/}}; echo "fks egress proxy: $name" > {ERROR_DIR}/$name; done; '
    f'echo "{_REFUSED}" > {ERROR_DIR}/ERR_ACCESS_DENIED'
)

# What the API port passes on: (name, method, path and query). Anything else gets 403 before
# the credential is added, so a method or path that reflects a request (TRACE, an echo or
# debug endpoint of a gateway, an error page) never gets a request holding the credential.
API_CALLS: tuple[tuple[str, str, str], ...] = (
    ("messages", "POST", r"^/v1/messages(/count_tokens)?(\?beta=true)?$"),
    ("models", "GET", r"^/v1/models(/[A-Za-z0-9][A-Za-z0-9._:@-]*)?(\?[A-Za-z0-9_=&.-]*)?$"),
)
# Claude Code's connection warm-up (HEAD on the base URL, its answer unused): passed on
# without the credential.
API_WARM_UP = ("warm_up", "HEAD", r"^/$")


def squid_config(
    allow: Sequence[AllowEntry],
    api: ApiUpstream | None,
    *,
    forward_port: int = FORWARD_PORT,
    api_port: int = API_PORT,
) -> str:
    """squid.conf for one run: a forward proxy on 127.0.0.1:`forward_port` that lets through
    requests and CONNECTs to the allowed host:port pairs only (403 for the rest), and with
    `api` an accelerator on 127.0.0.1:`api_port` that sends the API calls (API_CALLS) to the
    API with the real credential in place of whatever the client sent (403 for the rest)."""
    lines = [
        "# fks egress proxy (generated for one run)",
        f"http_port 127.0.0.1:{forward_port} name=forward",
        *_settings(),
        "acl CONNECT method CONNECT",
        "acl fks_api myportname api",
    ]
    unique = list(dict.fromkeys(allow))
    for n, entry in enumerate(unique, start=1):
        lines.append(f"acl allow{n}_host dstdomain -n {entry.host}")
        lines.append(f"acl allow{n}_port port {' '.join(map(str, entry.ports))}")
    # The cache manager would show this config, credential included, to anyone who asks.
    lines.append("http_access deny manager")
    if api is not None:
        lines += _api_acls()
        lines += ["http_access allow fks_api_call", "http_access allow fks_api_warm_up"]
    # Before the allow-list: the API's host may be on it, but not through this port.
    lines.append("http_access deny fks_api")
    lines += [f"http_access allow allow{n}_host allow{n}_port" for n in range(1, len(unique) + 1)]
    lines.append("http_access deny all")
    if api is not None:
        lines += _accelerator(api, api_port)
    return "\n".join(lines) + "\n"


def _settings() -> list[str]:
    return [
        "pid_filename none",
        "cache deny all",
        "cache_mem 0 MB",
        "cache_store_log none",
        "digest_generation off",
        "pinger_enable off",
        # Docker's default open-files limit is ~1M: Squid would size its tables to it.
        "max_filedescriptors 1024",
        "shutdown_lifetime 0 seconds",
        "visible_hostname fks-proxy",
        "via off",
        "forwarded_for delete",
        "httpd_suppress_version_string on",
        "cachemgr_passwd disable all",
        f"error_directory {ERROR_DIR}",
        "email_err_data off",
        # time, status, method, host, port, local port, bytes from and to the agent, secret added.
        "logformat fks %ts.%03tu %Ss/%03>Hs %rm %>rd %>rP %lp %>st %<st %{fks_secret}note",
        f"access_log stdio:{ACCESS_LOG} logformat=fks",
        "buffered_logs off",
        f"cache_log {CACHE_LOG}",
    ]


def _api_acls() -> list[str]:
    """fks_api_call: a request on the API port that is one of API_CALLS; fks_api_warm_up:
    API_WARM_UP on that port."""
    lines: list[str] = []
    for name, method, path in (*API_CALLS, API_WARM_UP):
        lines += [
            f"acl fks_{name}_method method {method}",
            f"acl fks_{name}_path urlpath_regex {path}",
            f"acl fks_api_{name} all-of fks_api fks_{name}_method fks_{name}_path",
        ]
    calls = " ".join(f"fks_api_{name}" for name, _, _ in API_CALLS)
    return [*lines, f"acl fks_api_call any-of {calls}"]


def _accelerator(api: ApiUpstream, api_port: int) -> list[str]:
    default_port = 443 if api.tls else 80
    site = api.host if api.port == default_port else f"{api.host}:{api.port}"
    if api.header == "x-api-key":
        name, value = "X-Api-Key", api.credential
    else:
        name, value = "Authorization", f"Bearer {api.credential}"
    # forceddomain: the API's own Host header whatever the client sent, so a request with the
    # credential never names another site behind the same address. no-netdb-exchange: Squid
    # asks the API nothing of its own (it would GET /squid-internal-dynamic/netdb).
    peer = (
        f"cache_peer {api.host} parent {api.port} 0 no-query no-digest no-netdb-exchange "
        f"originserver forceddomain={site} name=fks_upstream"
    )
    return [
        f"http_port 127.0.0.1:{api_port} accel defaultsite={site} no-vhost name=api",
        peer + (" tls" if api.tls else ""),
        "cache_peer_access fks_upstream allow fks_api",
        "cache_peer_access fks_upstream deny all",
        "never_direct allow fks_api",
        "always_direct allow !fks_api",
        # Only on the API port: a request to an allowed host must never carry the credential.
        f"request_header_access {name} deny fks_api",
        f'request_header_add {name} "{value}" fks_api_call',
    ]
