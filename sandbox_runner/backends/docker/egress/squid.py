"""Squid's configuration for the egress proxy: the allow-list forward proxy (with a deny list
and, for destinations with secrets, TLS ended in the proxy and the secret's header added), and
the model API accelerator, which passes only the API calls Claude Code makes and puts the real
credential on them. Nothing here starts anything; `egress` puts the text into the proxy
container.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from sandbox_runner.backends.docker.egress.upstream import API_KINDS, Kind
from sandbox_runner.errors import ConfigError

if TYPE_CHECKING:
    from sandbox_runner.plan.allow import AllowEntry
    from sandbox_runner.plan.secrets import Secret


class ApiUpstream(Protocol):
    """What the accelerator needs of a model API (`egress.ApiUpstream` is one)."""

    @property
    def kind(self) -> Kind: ...
    @property
    def path(self) -> str: ...
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


CA_DIR = "/dev/shm/fks-ca"
"""The run's certificate authority, made in the proxy container when it starts: its key never
leaves that directory (the proxy user's only)."""
CA_PEM = f"{CA_DIR}/ca.pem"  # key and certificate, for Squid
CERT_DB = "/dev/shm/fks-ssl_db"  # certificates Squid made for the destinations, this run's
ORIGIN_CAS = "/etc/fks-origin-cas.pem"  # sandbox.caCerts: CAs the proxy trusts besides the system's
FORWARD_PORT = 3128  # on 127.0.0.1 in both containers: the allow-list proxy
API_PORT = API_KINDS["anthropic"].port  # on 127.0.0.1 in both: Anthropic's API, credential added
QUOTED_LIMIT = 2048
"""Characters of a quoted squid.conf value at most: Squid refuses a longer one, and its error
shows it (a secret's header value among them)."""
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
_METHOD_REFUSED = (
    "fks egress proxy: ERR_FKS_METHOD: refused; this destination has a secret and takes only "
    "the methods of its sandbox.secrets entry"
)
ERROR_PAGES_SCRIPT = (
    f"mkdir -p {ERROR_DIR} && for page in /usr/share/squid/errors/templates/ERR_*; do "
    f'name=${{page##*/}}; echo "fks egress proxy: $name" > {ERROR_DIR}/$name; done; '
    f'echo "{_REFUSED}" > {ERROR_DIR}/ERR_ACCESS_DENIED; '
    f'echo "{_METHOD_REFUSED}" > {ERROR_DIR}/ERR_FKS_METHOD; '
    f": > {ERROR_DIR}/error-details.txt"
)

# What the Anthropic API port passes on (name, method, path and query), as Squid matches it.
API_CALLS: tuple[tuple[str, str, str], ...] = tuple(
    (name, method, f"^{path}$") for name, method, path in API_KINDS["anthropic"].calls
)
# A client's connection warm-up (Claude Code's HEAD on the base URL, its answer unused): passed
# on without the credential.
API_WARM_UP = ("warm_up", "HEAD", r"^/$")
_HEADER_NAMES = {"x-api-key": "X-Api-Key", "authorization": "Authorization"}
_HEADER_NAMES["x-goog-api-key"] = "X-Goog-Api-Key"


def api_port_name(kind: str) -> str:
    """Squid's name of the API port of `kind` (Anthropic's is `api`, as it always was)."""
    return "api" if kind == "anthropic" else f"api_{kind}"


def squid_config(
    allow: Sequence[AllowEntry],
    api: ApiUpstream | Sequence[ApiUpstream] | None,
    *,
    deny: Sequence[AllowEntry] = (),
    secrets: Sequence[Secret] = (),
    origin_cas: bool = False,
    forward_port: int = FORWARD_PORT,
    meter_port: int | None = None,
) -> str:
    """squid.conf for one run: a forward proxy on 127.0.0.1:`forward_port` that lets through
    requests and CONNECTs to the allowed host:port pairs and the secrets' destinations only,
    never to `deny` (403 for the rest); with `secrets`, TLS to their destinations ends in the
    proxy, only their methods pass and each gets its header (`bump_lines`); and for each
    model API in `api` an accelerator on 127.0.0.1 (its kind's port) that sends its calls
    (`ApiKind.calls`) to it with the real credential in place of whatever the client sent (403
    for the rest), through the meter on 127.0.0.1:`meter_port` when there is one."""
    apis = _apis(api)
    secrets = ordered_secrets(secrets)
    _check_values(secrets)
    bump = " ssl-bump tls-cert=" + CA_PEM + " generate-host-certificates=on" if secrets else ""
    lines = [
        "# fks egress proxy (generated for one run)",
        f"http_port 127.0.0.1:{forward_port} name=forward{bump}",
        *_settings(),
        "acl CONNECT method CONNECT",
        f"acl fks_api myportname {' '.join(_port_names(apis))}",
    ]
    unique = list(dict.fromkeys(allow))
    denied = list(dict.fromkeys(deny))
    for prefix, entries in (("allow", unique), ("deny", denied)):
        for n, entry in enumerate(entries, start=1):
            lines += _destination_acls(f"{prefix}{n}", entry)
    lines += _secret_acls(secrets)
    # The cache manager would show this config, credential included, to anyone who asks.
    lines.append("http_access deny manager")
    if apis:
        lines += _api_acls(apis)
        lines += ["http_access allow fks_api_call", "http_access allow fks_api_warm_up"]
    # Before the allow-list: the API's host may be on it, but not through this port.
    lines.append("http_access deny fks_api")
    if meter_port is not None:
        # The meter is the accelerators' alone: never a destination of the agent's.
        lines += [
            "acl fks_loopback dst 127.0.0.0/8 ::1",
            f"acl fks_meter_port port {meter_port}",
            # The port first: only a request to it costs a lookup of its destination.
            "http_access deny fks_meter_port fks_loopback",
        ]
    # A deny entry without a port covers every port.
    lines += [
        f"http_access deny deny{n}_host" + (f" deny{n}_port" if entry.port else "")
        for n, entry in enumerate(denied, start=1)
    ]
    lines += _secret_access(secrets)
    lines += [f"http_access allow allow{n}_host allow{n}_port" for n in range(1, len(unique) + 1)]
    lines.append("http_access deny all")
    if secrets:
        lines += bump_lines(secrets, origin_cas=origin_cas)
    for upstream in apis:
        lines += _accelerator(upstream, meter_port)
    if apis:
        lines += _credentials(apis)
    return "\n".join(lines) + "\n"


def _apis(api: ApiUpstream | Sequence[ApiUpstream] | None) -> list[ApiUpstream]:
    """One API per kind (the first of each)."""
    given = [] if api is None else list(api) if isinstance(api, Sequence) else [api]
    return list({upstream.kind: upstream for upstream in reversed(given)}.values())[::-1]


def _port_names(apis: Sequence[ApiUpstream]) -> list[str]:
    # With no API the ACL names a port no request arrives on, as it always did.
    return [api_port_name(upstream.kind) for upstream in apis] or ["api"]


def _check_values(secrets: Sequence[Secret]) -> None:
    """ConfigError, before Squid sees one, for a header value longer than Squid reads."""
    for secret in secrets:
        if len(secret.value) > QUOTED_LIMIT:
            raise ConfigError(
                f"secret for {secret.destination}: its {secret.header} header would be "
                f"{len(secret.value)} characters; the egress proxy passes at most "
                f"{QUOTED_LIMIT}; check the value in {secret.source}"
            )


def _destination_acls(name: str, entry: AllowEntry) -> list[str]:
    """`<name>_host` and `<name>_port` for a destination; a wildcard matches one label or more
    before its domain, never the domain itself."""
    if entry.wildcard:
        host = f"acl {name}_host dstdom_regex -n -i ^([a-z0-9_-]+\\.)+{re.escape(entry.domain)}$"
    else:
        host = f"acl {name}_host dstdomain -n {entry.host}"
    return [host, f"acl {name}_port port {' '.join(map(str, entry.ports))}"]


def ordered_secrets(secrets: Sequence[Secret]) -> list[Secret]:
    """The most specific first (a name before a wildcard, a longer domain before a shorter, a
    port before none): a request two secrets' destinations match gets the first one's only."""
    unique = list(dict.fromkeys(secrets))
    return sorted(
        unique,
        key=lambda s: (
            s.destination.wildcard,
            -len(s.destination.domain),
            s.destination.port is None,
        ),
    )


def _secret_acls(secrets: Sequence[Secret]) -> list[str]:
    if not secrets:
        return []
    lines = [
        "acl fks_forward myportname forward",
        "acl fks_https proto HTTPS",
        # A request that came inside a TLS tunnel the proxy ended (a secret's destination).
        "acl fks_in_tls connections_encrypted",
    ]
    for n, secret in enumerate(secrets, start=1):
        lines += _destination_acls(f"fks_s{n}", secret.destination)
        lines += [
            f"acl fks_s{n} all-of fks_s{n}_host fks_s{n}_port",
            f"acl fks_s{n}_methods method {' '.join(secret.methods)}",
            # Only over TLS and only on the agent's port: never in clear text, never to the API.
            f"acl fks_s{n}_add all-of fks_s{n} fks_https fks_forward",
        ]
    return [*lines, f"acl fks_bump any-of {' '.join(f'fks_s{n}' for n in _numbers(secrets))}"]


def _secret_access(secrets: Sequence[Secret]) -> list[str]:
    """A secret's destination: its methods only (refused before the secret is added), then
    allowed. A CONNECT inside a secret's tunnel is refused: it would open a raw tunnel over
    the proxy's connection to the destination, past the methods and every other check."""
    if not secrets:
        return []
    lines = ["http_access deny CONNECT fks_in_tls"]
    lines += [f"deny_info ERR_FKS_METHOD fks_s{n}_methods" for n in _numbers(secrets)]
    lines += [f"http_access deny fks_s{n} !CONNECT !fks_s{n}_methods" for n in _numbers(secrets)]
    return lines + [f"http_access allow fks_s{n}" for n in _numbers(secrets)]


def bump_lines(secrets: Sequence[Secret], *, origin_cas: bool) -> list[str]:
    """TLS ended in the proxy for the secrets' destinations only (every other CONNECT is
    spliced, untouched, before its first byte is read); the origin's certificate verified
    (with `origin_cas`, against ORIGIN_CAS besides the system's); each destination's header
    replaced by its secret, marked in the access log."""
    lines = [
        f"sslcrtd_program /usr/lib/squid/security_file_certgen -s {CERT_DB} -M 4MB",
        "sslcrtd_children 4 startup=1 idle=1",
        "acl fks_step1 at_step SslBump1",
        "ssl_bump splice !fks_bump",
        "ssl_bump peek fks_step1",
        "ssl_bump bump all",
        "sslproxy_cert_error deny all",
        "on_unsupported_protocol respond all",
        # The system's CAs are trusted too (default-ca); Debian's OpenSSL wants TLS 1.2 at least.
        *([f"tls_outgoing_options cafile={ORIGIN_CAS}"] if origin_cas else []),
    ]
    numbers = _numbers(secrets)
    for n, secret in zip(numbers, secrets, strict=True):
        lines.append(f"request_header_access {secret.header} deny fks_s{n}")
    for n, secret in zip(numbers, secrets, strict=True):
        # A request two destinations match gets the most specific one's secret only.
        earlier = "".join(f" !fks_s{m}" for m in range(1, n))
        lines += [
            f'request_header_add {secret.header} "{secret.value}" fks_s{n}_add{earlier}',
            # Squid notes before it checks access: a refused method is no secret added.
            f"note fks_secret {secret.destination} fks_s{n}_add fks_s{n}_methods{earlier}",
        ]
    return lines


def _numbers(secrets: Sequence[Secret]) -> range:
    return range(1, len(secrets) + 1)


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


def _api_acls(apis: Sequence[ApiUpstream]) -> list[str]:
    """fks_api_call: a request on an API port that is one of its kind's calls;
    fks_api_<kind>_call: one on that kind's port; fks_api_warm_up: API_WARM_UP on any."""
    lines: list[str] = []
    every: list[str] = []
    for upstream in apis:
        kind = upstream.kind
        lines.append(f"acl fks_port_{kind} myportname {api_port_name(kind)}")
        names: list[str] = []
        for name, method, path in API_KINDS[kind].calls:
            prefix = upstream.path.replace(".", "\\.")
            lines += [
                f"acl fks_{kind}_{name}_method method {method}",
                f"acl fks_{kind}_{name}_path urlpath_regex ^{prefix}{path}$",
                f"acl fks_api_{kind}_{name} all-of fks_port_{kind} "
                f"fks_{kind}_{name}_method fks_{kind}_{name}_path",
            ]
            names.append(f"fks_api_{kind}_{name}")
        lines.append(f"acl fks_api_{kind}_call any-of {' '.join(names)}")
        every.append(f"fks_api_{kind}_call")
    name, method, path = API_WARM_UP
    lines += [
        f"acl fks_{name}_method method {method}",
        f"acl fks_{name}_path urlpath_regex {path}",
        f"acl fks_api_{name} all-of fks_api fks_{name}_method fks_{name}_path",
    ]
    return [*lines, f"acl fks_api_call any-of {' '.join(every)}"]


def _accelerator(api: ApiUpstream, meter_port: int | None) -> list[str]:
    """The API port of `api`'s kind and its peer: the API itself, or the meter before it."""
    kind = api.kind
    default_port = 443 if api.tls else 80
    site = api.host if api.port == default_port else f"{api.host}:{api.port}"
    # forceddomain: the API's own Host header whatever the client sent, so a request with the
    # credential never names another site behind the same address. no-netdb-exchange: Squid
    # asks the API nothing of its own (it would GET /squid-internal-dynamic/netdb).
    host, port, tls = ("127.0.0.1", meter_port, "") if meter_port else (api.host, api.port, " tls")
    peer = (
        f"cache_peer {host} parent {port} 0 no-query no-digest no-netdb-exchange "
        f"originserver forceddomain={site} name=fks_upstream_{kind}"
    )
    return [
        f"http_port 127.0.0.1:{API_KINDS[kind].port} accel defaultsite={site} no-vhost "
        f"name={api_port_name(kind)}",
        peer + (tls if api.tls else ""),
        f"cache_peer_access fks_upstream_{kind} allow fks_port_{kind}",
        f"cache_peer_access fks_upstream_{kind} deny all",
    ]


def _credentials(apis: Sequence[ApiUpstream]) -> list[str]:
    """Whatever credential header a client sent removed on every API port, and each API's
    real one added to its own calls only."""
    lines = ["never_direct allow fks_api", "always_direct allow !fks_api"]
    # Only on the API ports: a request to an allowed host must never carry a credential.
    lines += [f"request_header_access {name} deny fks_api" for name in _HEADER_NAMES.values()]
    for api in apis:
        name = _HEADER_NAMES[api.header]
        value = f"Bearer {api.credential}" if api.header == "authorization" else api.credential
        lines.append(f'request_header_add {name} "{value}" fks_api_{api.kind}_call')
    return lines
