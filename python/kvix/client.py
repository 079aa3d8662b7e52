"""An HTTP client for kvindex's API (the API of NVIDIA Dynamo's standalone KV
indexer, which it serves): overlap queries, the best worker for a prompt,
engine registrations, peers, health. Standard library only (urllib, json).

Every call has a timeout; every failure is one of this module's exceptions,
with a message that says what was asked of which service and what went wrong.
"""
import json
import socket
import urllib.error
import urllib.parse
import urllib.request

__all__ = [
    "Client", "Overlap", "Match",
    "KvixError", "Unreachable", "Timeout", "ServiceError", "BadRequest", "NotFound",
    "Conflict", "ProtocolError",
]

_U64 = (1 << 64) - 1
BODY_MAX = 8 << 20  # kvindex's (and Dynamo's) request body limit
ANSWER_MAX = 256 << 20  # ceiling on an answer read (a /dump of a large index)


class KvixError(Exception):
    """Every error of this client."""


class Unreachable(KvixError):
    """No HTTP answer: connection refused, name not resolved, connection reset."""


class Timeout(Unreachable):
    """No answer within the client's timeout."""


class ServiceError(KvixError):
    """The service answered with an error status; .status and .message
    (kvindex's {"error": ...})."""

    def __init__(self, msg, status, message):
        super().__init__(msg)
        self.status = status
        self.message = message


class BadRequest(ServiceError):
    """400: the request was malformed (a field missing or of the wrong type)."""


class NotFound(ServiceError):
    """404: an unknown model or tenant, or nothing matched an unregistration."""


class Conflict(ServiceError):
    """409: a block size other than the partition's, or a duplicate registration."""


class ProtocolError(KvixError):
    """An answer that is not what the API says (not JSON, wrong shape, too large)."""


_BY_STATUS = {400: BadRequest, 404: NotFound, 409: Conflict}


def _u64(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _U64:
        raise ValueError("kvix: %s %r is not an integer from 0 to 2^64-1" % (name, v))
    return v


class Match:
    """One (worker, dp rank) of an overlap answer: ``tokens`` its matched
    prefix in tokens (matched blocks times the block size), ``blocks_held``
    the blocks it holds in all (Dynamo's tree size)."""

    __slots__ = ("worker", "dp", "tokens", "blocks_held")

    def __init__(self, worker, dp, tokens, blocks_held):
        self.worker, self.dp, self.tokens, self.blocks_held = worker, dp, tokens, blocks_held

    def __repr__(self):
        return "Match(worker=%d, dp=%d, tokens=%d, blocks_held=%r)" % (
            self.worker, self.dp, self.tokens, self.blocks_held)

    def __eq__(self, other):
        return isinstance(other, Match) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)


class Overlap:
    """An answer of /query or /query_by_hash: ``matches``, one Match per
    (worker, dp) with a score above 0, best first (longest prefix, then fewer
    blocks held, then the lower worker and rank); ``raw`` the JSON answer."""

    __slots__ = ("matches", "raw")

    def __init__(self, raw):
        self.raw = raw
        try:
            scores, sizes = raw["scores"], raw.get("tree_sizes") or {}
            ms = []
            for w, ranks in scores.items():
                for dp, tokens in ranks.items():
                    held = (sizes.get(w) or {}).get(dp)
                    ms.append(Match(int(w), int(dp), int(tokens), held))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ProtocolError("kvix: not an overlap answer (%s): %.200r" % (e, raw)) from None
        ms.sort(key=lambda m: (-m.tokens, m.blocks_held if m.blocks_held is not None else 0,
                               m.worker, m.dp))
        self.matches = ms

    def best(self):
        """The best Match, or None when no worker holds the first block."""
        return self.matches[0] if self.matches else None

    def scores(self):
        """{(worker, dp): matched tokens}."""
        return {(m.worker, m.dp): m.tokens for m in self.matches}

    def __repr__(self):
        return "Overlap(%r)" % (self.matches,)


class Client:
    """A kvindex (or Dynamo indexer) at ``url`` ("http://host:8090"); every
    request gives up after ``timeout`` seconds."""

    def __init__(self, url, timeout=2.0):
        p = urllib.parse.urlsplit(url)
        if p.scheme not in ("http", "https") or not p.hostname:
            raise ValueError(
                "kvix: bad service URL %r (expected http://HOST:PORT or https://HOST:PORT)" % url)
        try:
            p.port  # a port that is not a number raises here
        except ValueError as e:
            raise ValueError("kvix: bad service URL %r (%s)" % (url, e)) from None
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError("kvix: timeout must be a positive number of seconds, not %r" % timeout)
        self.url = url.rstrip("/")
        self.timeout = float(timeout)

    def __repr__(self):
        return "Client(%r, timeout=%g)" % (self.url, self.timeout)

    # ---- the transport ----

    def _call(self, method, path, body=None, text=False):
        data = None
        headers = {}
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            if len(data) > BODY_MAX:
                raise ValueError("kvix: request body of %d bytes is over the service's limit "
                                 "of %d" % (len(data), BODY_MAX))
            headers["Content-Type"] = "application/json"
        what = "%s %s%s" % (method, self.url, path)
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read(ANSWER_MAX + 1)
                status = r.status
        except urllib.error.HTTPError as e:
            raw = e.read(64 << 10)
            try:
                message = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                message = raw.decode("utf-8", "replace").strip() or e.reason
            cls = _BY_STATUS.get(e.code, ServiceError)
            raise cls("kvix: %s: %d %s" % (what, e.code, message), e.code, message) from None
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise Timeout("kvix: %s: no answer within %g s" % (what, self.timeout)) from None
            if isinstance(reason, OSError) and reason.strerror:
                reason = reason.strerror
            raise Unreachable("kvix: %s: cannot reach the service: %s" % (what, reason)) from None
        except (socket.timeout, TimeoutError):
            raise Timeout("kvix: %s: no answer within %g s" % (what, self.timeout)) from None
        except (ConnectionError, OSError) as e:
            raise Unreachable("kvix: %s: connection failed: %s" % (what, e.strerror or e)) from None
        if len(raw) > ANSWER_MAX:
            raise ProtocolError("kvix: %s: answer over %d bytes" % (what, ANSWER_MAX))
        if text:
            return raw.decode("utf-8", "replace")
        if status == 204 or not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ProtocolError("kvix: %s: answer is not JSON: %.200r" % (what, raw)) from None

    # ---- queries ----

    def query(self, tokens, model, tenant=None, lora=None):
        """Overlap of a prompt's token ids with every worker's cache (POST
        /query): the service hashes them with the partition's block size."""
        body = {"token_ids": list(tokens), "model_name": model}
        for t in body["token_ids"]:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= 0xFFFFFFFF:
                raise ValueError("kvix: token %r is not an integer from 0 to 4294967295" % (t,))
        if tenant is not None:
            body["tenant_id"] = tenant
        if lora is not None:
            body["lora_name"] = lora
        return Overlap(self._call("POST", "/query", body))

    def query_by_hash(self, local_hashes, model, tenant=None):
        """Overlap of a prompt given as its blocks' local hashes (ints, as
        kvix.block_hashes(...).local gives them) (POST /query_by_hash)."""
        body = {"block_hashes": [_u64("hash", h) for h in local_hashes], "model_name": model}
        if tenant is not None:
            body["tenant_id"] = tenant
        return Overlap(self._call("POST", "/query_by_hash", body))

    def best_worker(self, tokens, model, tenant=None, lora=None):
        """The Match of the worker holding the longest prefix of the prompt,
        or None when no worker holds its first block, or the index has never
        seen the model or tenant (nothing cached there yet)."""
        try:
            return self.query(tokens, model, tenant, lora).best()
        except NotFound:
            return None

    # ---- engines ----

    def register(self, instance_id, endpoint, model, block_size, tenant=None, dp_rank=None,
                 replay_endpoint=None):
        """Subscribe the service to an engine's KV-event publisher (POST /register)."""
        body = {"instance_id": _u64("instance id", instance_id), "endpoint": endpoint,
                "model_name": model, "block_size": block_size}
        if tenant is not None:
            body["tenant_id"] = tenant
        if dp_rank is not None:
            body["dp_rank"] = dp_rank
        if replay_endpoint is not None:
            body["replay_endpoint"] = replay_endpoint
        self._call("POST", "/register", body)

    def unregister(self, instance_id, model, tenant=None, dp_rank=None):
        """Drop an engine's subscriptions and its blocks (POST /unregister): no
        tenant, every tenant of the model; no dp_rank, every rank."""
        body = {"instance_id": _u64("instance id", instance_id), "model_name": model}
        if tenant is not None:
            body["tenant_id"] = tenant
        if dp_rank is not None:
            body["dp_rank"] = dp_rank
        self._call("POST", "/unregister", body)

    def workers(self):
        """{instance_id: {dp_rank: endpoint}} of the subscriptions (GET /workers)."""
        raw = self._call("GET", "/workers")
        try:
            return {int(w["instance_id"]): {int(k): v for k, v in w["endpoints"].items()}
                    for w in raw}
        except (KeyError, TypeError, AttributeError, ValueError):
            raise ProtocolError("kvix: GET %s/workers: not a worker list: %.200r"
                                % (self.url, raw)) from None

    # ---- peers ----

    def peers(self):
        """The peer URLs the service recovers from (GET /peers)."""
        raw = self._call("GET", "/peers")
        if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
            raise ProtocolError("kvix: GET %s/peers: not a list of URLs: %.200r" % (self.url, raw))
        return raw

    def register_peer(self, url):
        self._call("POST", "/register_peer", {"url": url})

    def deregister_peer(self, url):
        self._call("POST", "/deregister_peer", {"url": url})

    # ---- the service ----

    def health(self):
        """True when the service answers /health with 200; raises otherwise."""
        self._call("GET", "/health")
        return True

    def metrics(self):
        """The Prometheus text of GET /metrics."""
        return self._call("GET", "/metrics", text=True)

    def dump(self):
        """GET /dump: {"MODEL:TENANT": {"block_size": N, "events": [RouterEvent...]}}."""
        return self._call("GET", "/dump")
