"""Keep credentials out of every text the library writes: error messages, log lines, reprs.

Users hand us credentials in three places: in the URL (`s3://KEY:SECRET@bucket/x.zarr`, a
presigned `https://...?X-Amz-Signature=...`, an Azure SAS `...?sv=...&sig=...`), in
`storage_options` (`secret_access_key`, `sas_key`, `service_account_key`, headers in
`client_options`), or in the environment. obstore echoes the request URL, userinfo and
query string included, in its errors; servers echo parts of the request in theirs; zarr puts
`repr(store)` in its messages; and the library quotes all of these. So every text built from
what a user gave, or from what a dependency said, goes through `redact` before it leaves:
a traceback pasted into an issue, a CI log or a checkpoint must not hand out an account.

What is redacted keeps its shape, so the text still says what went wrong: scheme, host,
bucket, path and the names (and non-secret values) of query parameters stay; only the
secret parts become `***` (`s3://***@bucket/x.zarr`, `...&X-Amz-Signature=***`).

The rules, in the order they run:

1. Known values. The values of secret `storage_options` and the secret parts of the URL
   (`secrets_in`) are replaced wherever they stand as a whole word, verbatim,
   percent-encoded, or escaped as in JSON or a Python repr: an obstore error may quote a
   configuration value with no name next to it (serde's "invalid type: integer `...`").
   Values shorter than `MIN_SECRET_LENGTH`, and `true`/`false`, are left alone: they
   cannot be told from ordinary words, and replacing them would garble every message;
   "whole word" keeps a password such as `reader` from eating into `ChunkReader`.
2. URL userinfo: `scheme://user:password@host` becomes `scheme://***@host`, also when the
   password was pasted with a raw `/` (AWS secret keys have them) but not when `host:port`
   is followed by a path with an `@` in it. A user name alone is replaced too (tokens are
   often passed as the user name), except on Azure's schemes, where
   `abfs://container@account...` names a container, not a person.
3. PEM private keys (`-----BEGIN ... PRIVATE KEY-----` to its END, or to the end of the
   text when the END was cut off): service-account key files carry one.
4. `name=value` and `name: value` pairs whose name is a secret's (`is_secret_name`): query
   parameters (`X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`, Azure's
   `sig`, `token`, a GCS API `key`), form fields, header dumps
   (`x-amz-security-token:...`, `Authorization: Bearer ...`), JSON (`"private_key": "..."`)
   and Rust debug output (`secret_access_key: Some("...")`). A bare `key` counts only as a
   query parameter, and a one-word name followed by `:` only with a quoted value or when
   it is unmistakable (`Authorization:`), because "Configuration key: 'x'" and "error
   getting token: timed out" are messages, not secrets.
5. XML elements with a secret name: S3 error bodies echo `<AWSAccessKeyId>` and
   `<SignatureProvided>`.
6. `Bearer <token>` anywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn
from urllib.parse import quote, quote_plus, unquote, urlsplit

REDACTED = "***"
MIN_SECRET_LENGTH = 4

# Words that make a name a secret's, matched against the name's words (split at `_`, `-`,
# `.` and camelCase) ...
_SECRET_WORDS = frozenset(
    {
        "key",
        "sig",
        "signature",
        "secret",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "token",
        "credential",
        "credentials",
        "authorization",
        "cookie",
        "apikey",
        "sas",
    }
)
# ... and inside the name written without separators (`AWSAccessKeyId`, `sessiontoken`).
_SECRET_FRAGMENTS = (
    "secret",
    "password",
    "passwd",
    "token",
    "signature",
    "credential",
    "apikey",
    "accesskey",
    "privatekey",
    "authorization",
)
# Switches named after what they turn off (`skip_signature`, `unsigned_payload`) ...
_FLAG_PREFIXES = frozenset({"skip", "disable", "disabled", "unsigned", "use", "allow", "no"})
# ... and names whose value says where a secret is, or what kind it is, not the secret
# itself (`web_identity_token_file`, `fabric_token_service_url`, `credential_type`).
_POINTER_SUFFIXES = frozenset(
    {"file", "path", "uri", "url", "endpoint", "type", "algorithm", "expires", "expiry"}
)
# What aliases and headers put before an option's name (`aws_`, `azure_storage_`, `x-amz-`).
_PROVIDER_PREFIXES = frozenset({"aws", "amz", "google", "goog", "azure", "storage", "ms", "x"})
# GCS's path to a credentials file, named like a secret.
_NOT_SECRET = frozenset({"application_credentials"})
# One-word names that announce a secret even before an unquoted value (rule 4).
_UNMISTAKABLE = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "password", "passwd"}
)
# Azure's schemes, whose userinfo is a container name (rule 2).
_AZURE_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs", "az", "azure", "adl"})

# What precedes the credentials in an Authorization header.
_AUTH_SCHEMES = ("Bearer", "Basic", "Digest", "AWS4-HMAC-SHA256", "SharedKey", "SharedKeyLite")

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_URL_USERINFO = re.compile(
    r"(?P<scheme>(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*)://"
    r"(?P<userinfo>[^\s/?#'\"<>`\\]+"
    # a password with a raw `/` (AWS secret keys often have one), not a port before a path
    r"""|[^\s/?#'"<>`\\:@\[\]]*:(?![0-9]*(?:[/?#\s'"]|$))[^\s?#'"<>`\\@]*)@"""
)
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*)",
    re.DOTALL,
)
_PAIR_HEAD = re.compile(
    r"""(?P<lead>[?&;]?)(?<![\w.\-])(?P<q>["']?)(?P<name>[A-Za-z][\w.\-]*)(?P=q)"""
    r"""(?P<sep>[ \t]*[:=][ \t]*)"""
)
_QUOTED_VALUE = re.compile(r"""Some\("(?:[^"\\]|\\.)*"\)|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'""")
# An unquoted value ends before a delimiter, and gives back the sentence's punctuation.
_BARE_VALUE = re.compile(
    r"(?:(?:" + "|".join(_AUTH_SCHEMES) + r")[ \t]+)?"
    r"""[^\s&#,;'"<>()\[\]{}]*[^\s&#,;'"<>()\[\]{}:.!?]"""
)
_XML_ELEMENT = re.compile(r"<(?P<tag>[A-Za-z][\w.\-]*)>(?P<value>[^<]*)</(?P=tag)>")
_BEARER = re.compile(r"\bBearer[ \t]+[A-Za-z0-9\-._~+/]+=*")


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def is_secret_name(name: str) -> bool:
    """Whether an option, query parameter, header or field called `name` holds a secret.

    Decided from the name's words rather than from a list of obstore's keys, so that its
    aliases (`aws_secret_access_key`, `AZURE_STORAGE_SAS_TOKEN`), header names
    (`x-api-key`) and the fields of other services' URLs are covered too; a few names are
    excluded because their value only points at a secret (a file, a URL) or switches
    signing off.

    Args:
        name: the name as written: `secret_access_key`, `X-Amz-Signature`, `AWSAccessKeyId`.
    """
    words = _words(name)
    while len(words) > 1 and words[0] in _PROVIDER_PREFIXES:
        words = words[1:]  # aws_skip_signature is skip_signature
    if not words or "_".join(words) in _NOT_SECRET:
        return False
    if words[0] in _FLAG_PREFIXES or words[-1] in _POINTER_SUFFIXES:
        return False
    joined = "".join(words)
    return any(w in _SECRET_WORDS for w in words) or any(f in joined for f in _SECRET_FRAGMENTS)


def _masked(value: str) -> str:
    """`value` replaced by `***`, keeping the quotes around it."""
    if value.startswith('Some("'):
        return f'Some("{REDACTED}")'
    if value[:1] in ('"', "'"):
        return value[0] + REDACTED + value[0]
    return REDACTED


def _redact_userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match["scheme"], match["userinfo"]
    if scheme.lower() in _AZURE_SCHEMES and ":" not in userinfo:
        return match[0]  # abfs://container@account...: not a credential
    if userinfo == REDACTED:
        return match[0]
    return f"{scheme}://{REDACTED}@"


def _pair_value(head: re.Match[str], text: str) -> re.Match[str] | None:
    """The value after `head` (a name and its separator) when rule 4 redacts it, else None.

    Decided from the name and the separator before the value is looked at: a value is
    only scanned to be replaced, so that a text of many pairs is read once."""
    name, sep = head["name"], head["sep"]
    if not is_secret_name(name):
        return None
    if name.lower() == "key" and not (head["lead"] and "=" in sep):
        return None  # only `?key=...` (a GCS API key) is one
    quoted = _QUOTED_VALUE.match(text, head.end())
    if quoted is not None:
        return quoted
    compound = len(_words(name)) > 1 or any(c in name for c in "_-.")
    if ":" in sep and not compound and name.lower() not in _UNMISTAKABLE:
        return None  # "error getting token: timed out"
    return _BARE_VALUE.match(text, head.end())


def _sub_pairs(text: str) -> str:
    """Rule 4 over all of `text`. The scan goes on right after the separator of a pair that
    is not a secret's: `https://host/x?sig=...` reads as the pair `https` = `//host/...`,
    whose value holds the pair to redact."""
    out: list[str] = []
    pos = 0
    while (head := _PAIR_HEAD.search(text, pos)) is not None:
        value = _pair_value(head, text)
        out.append(text[pos : head.end()])
        pos = head.end()
        if value is not None:
            out.append(_masked(value[0]))
            pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def _redact_element(match: re.Match[str]) -> str:
    if not is_secret_name(match["tag"]) or not match["value"]:
        return match[0]
    return f"<{match['tag']}>{REDACTED}</{match['tag']}>"


def _forms(secret: str) -> set[str]:
    """The ways `secret` may be written in a text: as is, percent-encoded, escaped as in
    JSON or in a Python repr."""
    return {
        secret,
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
    }


def _known_values(forms: Iterable[str]) -> re.Pattern[str]:
    """One pattern for all `forms`, longest first, each matched as a whole word: a value
    that starts or ends with a letter or digit must not continue into one, so that a
    password such as `reader` leaves `ChunkReader` alone."""
    alternatives = []
    for form in sorted(forms, key=len, reverse=True):
        start = r"(?<![A-Za-z0-9])" if form[0].isalnum() else ""
        end = r"(?![A-Za-z0-9])" if form[-1].isalnum() else ""
        alternatives.append(start + re.escape(form) + end)
    return re.compile("|".join(alternatives))


def _scrubbable(secret: str) -> bool:
    return len(secret) >= MIN_SECRET_LENGTH and secret.lower() not in ("true", "false")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every credential in it replaced by `***` (the rules in the module's
    docstring); what is not a credential is left as it was.

    Args:
        text: any text: a URL, an error message, a repr, a whole multi-line error dump.
        secrets: values known to be secret (from `secrets_in`), removed wherever they
            appear; the patterns apply either way.
    """
    forms = {form for secret in secrets if _scrubbable(secret) for form in _forms(secret)}
    if forms:
        text = _known_values(forms).sub(REDACTED, text)
    text = _URL_USERINFO.sub(_redact_userinfo, text)
    text = _PEM_PRIVATE_KEY.sub(REDACTED, text)
    text = _sub_pairs(text)
    text = _XML_ELEMENT.sub(_redact_element, text)
    return _BEARER.sub(f"Bearer {REDACTED}", text)


def _url_secrets(text: str) -> set[str]:
    """The secret parts of `text` read as a URL or a query string: userinfo, and the values
    of secret query parameters; each as written and percent-decoded."""
    found: set[str] = set()
    credentials = _URL_USERINFO.match(text)  # as rule 2 reads it: a raw `/` included
    if credentials is not None and _redact_userinfo(credentials) != credentials[0]:
        userinfo = credentials["userinfo"]
        user, colon, password = userinfo.partition(":")
        # the password; a user name only when it stands alone (then it is often a token)
        secret = password if colon else user
        found.update((userinfo, secret, unquote(secret)))
    try:
        parts = urlsplit(text) if "://" in text else None
    except ValueError:
        parts = None
    query = text if parts is None else parts.query
    if "=" in query:
        for part in re.split(r"[&;]", query.lstrip("?")):
            name, _, value = part.partition("=")
            if value and is_secret_name(unquote(name)):
                found.update((value, unquote(value)))
    return found


def _leaves(value: Any) -> Iterable[str]:
    """Every scalar inside `value` (a JSON document's strings and numbers), as text."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield str(value)


def _option_secrets(name: str, value: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(value, Mapping):  # client_options, default_headers, ...
        for key, item in value.items():
            found |= _option_secrets(str(key), item)
        return found
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return found
    found |= _url_secrets(value)  # an endpoint or proxy URL with a password in it
    if not is_secret_name(name):
        return found
    found |= {value, value.strip(), *value.strip().splitlines()}  # a key file's newline
    scheme, _, credentials = value.strip().partition(" ")
    if scheme in _AUTH_SCHEMES:  # a header's `Bearer <token>`: the token alone too
        found.add(credentials.strip())
    try:
        document = json.loads(value)  # service_account_key: the key file's JSON text
    except ValueError:
        return found
    if isinstance(document, Mapping):
        for key, item in document.items():
            if is_secret_name(str(key)):
                found.update(_leaves(item))
    return found


def secrets_in(
    storage_options: Mapping[str, Any] | None = None, url: str | None = None
) -> frozenset[str]:
    """The secret values a user gave: what `redact` should remove besides its patterns.

    Args:
        storage_options: the options passed to obstore; the values of options with a secret
            name (`is_secret_name`), at any depth (`client_options.default_headers`), the
            secret fields of a JSON key (`service_account_key`'s `private_key`), and the
            password of any URL among the values (`endpoint`, `proxy_url`).
        url: the store's URL; its userinfo and its secret query parameters' values.
    """
    found: set[str] = set()
    for name, value in (storage_options or {}).items():
        found |= _option_secrets(str(name), value)
    if url is not None:
        found |= _url_secrets(url)
    return frozenset(s for s in found if _scrubbable(s))


def scrubbed(err: BaseException, secrets: Iterable[str] = ()) -> BaseException:
    """`err` itself when nothing in its text (or in the causes Python would print with it)
    needs redacting; else a stand-in of the same type, with the same traceback, whose text
    is redacted. Raise ours `from scrubbed(err)`, so that the cause printed under our
    message does not show what our message hides.

    Args:
        err: an exception about to be chained or re-raised.
        secrets: values known to be secret (from `secrets_in`).
    """
    secrets = frozenset(secrets)
    return _scrubbed(err, secrets, depth=0)


def _scrubbed(err: BaseException, secrets: frozenset[str], depth: int) -> BaseException:
    text = str(err)
    clean = redact(text, secrets)
    cause = err.__cause__
    context = None if err.__suppress_context__ else err.__context__
    new_cause = None if cause is None or depth > 8 else _scrubbed(cause, secrets, depth + 1)
    new_context = None if context is None or depth > 8 else _scrubbed(context, secrets, depth + 1)
    if clean == text and new_cause is cause and new_context is context:
        return err
    stand_in = _same_type_saying(err, clean) or RuntimeError(f"{type(err).__name__}: {clean}")
    # What Python printed under `err` (its cause, else its context), now as the cause:
    # raising the stand-in from an `except` block replaces its context with `err` itself.
    stand_in.__cause__ = new_cause if cause is not None else new_context
    stand_in.__suppress_context__ = True
    return stand_in.with_traceback(err.__traceback__)


def _same_type_saying(err: BaseException, text: str) -> BaseException | None:
    """An exception of `err`'s type whose text is `text`, or None where the type cannot
    make one (a constructor with other arguments, a `__str__` of its own)."""
    kind = type(err)
    makers = (lambda: kind(text), lambda: kind.__new__(kind))
    for make in makers:
        try:
            made = make()
            made.args = (text,)
            if str(made) == text:
                return made
        except Exception:
            continue
    return None


def raise_scrubbed(err: BaseException, secrets: Iterable[str] = ()) -> NoReturn:
    """Re-raise `err` from an `except` block: as it is when its text is clean, else its
    redacted stand-in (`scrubbed`), with the original kept out of the printed chain.

    Args:
        err: the exception being handled.
        secrets: values known to be secret (from `secrets_in`).
    """
    safe = scrubbed(err, secrets)
    if safe is err:
        raise err
    raise safe from safe.__cause__
