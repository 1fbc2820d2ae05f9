"""The one signer: tokens by purpose, each failure named, and digests that keep
every pseudonym and key already stored."""

from __future__ import annotations

import base64
import time
from datetime import date
from pathlib import Path

import pytest
from pydantic import SecretStr

from amelio.errors import InvalidToken
from amelio.feedback.store import chain_key
from amelio.privacy.anonymize import SaltedHasher
from amelio.privacy.identity import user_ref
from amelio.privacy.signing import Signer, equal, secret_key, signer
from amelio.web.session import csrf_token, dump_session, load_session, valid_csrf
from amelio.workspace.config import Settings

SECRET = b"workspace secret"
NOW = 1_780_000_000.0


def reason(token: str, purpose: str, *, now: float = NOW, key: bytes = SECRET) -> str:
    """Why ``token`` is refused for ``purpose`` (``details["reason"]``)."""
    with pytest.raises(InvalidToken) as caught:
        Signer(key).unsign(token, purpose, now=now)
    return str(caught.value.details["reason"])


def test_a_token_gives_back_its_value_for_its_purpose_only() -> None:
    s = Signer(SECRET)
    for value in ("01J0000000000000000000000Q", "q-1\nr-1", '{"k":1,"n":"Zoë"}', ""):
        token = s.sign(value, "client-token")
        assert s.unsign(token, "client-token") == value
        assert reason(token, "feedback-token") == "purpose"
    token = s.sign("q-1", "feedback-token")
    with pytest.raises(InvalidToken, match="signed for 'feedback-token' purpose"):
        s.unsign(token, "client-token", name="clientToken")
    # Relabelling it does not help: the purpose is in the key, not only in the text.
    relabelled = token.replace("feedback-token.", "client-token.", 1)
    assert reason(relabelled, "client-token") == "signature"


def test_forged_and_altered_tokens_fail_their_signature() -> None:
    token = Signer(SECRET).sign("client-1", "client-token", max_age_s=60, now=NOW)
    purpose, value, expiry, mac = token.split(".")
    assert reason(Signer(b"guess").sign("client-1", "client-token"), "client-token") == "signature"
    other = Signer(SECRET).sign("client-2", "client-token").split(".")[1]
    for forged in (
        f"{purpose}.{other}.{expiry}.{mac}",  # another value under this signature
        f"{purpose}.{value}.{int(expiry) + 3600}.{mac}",  # a later expiry
        f"{purpose}.{value}.{mac}",  # the expiry dropped
        f"{purpose}.{value}.{expiry}.{mac[:-1]}{'B' if mac[-1] == 'A' else 'A'}",
    ):
        assert reason(forged, "client-token") == "signature", forged


def test_every_truncation_is_named_as_one() -> None:
    for max_age in (None, 60):
        token = Signer(SECRET).sign("q-1\nr-1", "feedback-token", max_age_s=max_age, now=NOW)
        for end in range(len(token)):
            assert reason(token[:end], "feedback-token") == "malformed", token[:end]
    for junk in ("feedback-token.a.b.c.d", "feedback-token.é." + "A" * 43, "nonsense"):
        assert reason(junk, "feedback-token") == "malformed"


def test_a_token_expires_after_its_max_age_and_says_so() -> None:
    s = Signer(SECRET)
    token = s.sign("q-1", "feedback-token", max_age_s=60, now=NOW)
    assert s.unsign(token, "feedback-token", now=NOW + 59) == "q-1"
    with pytest.raises(InvalidToken, match="feedbackToken has expired"):
        s.unsign(token, "feedback-token", now=NOW + 61, name="feedbackToken")
    # Without a max age a token never expires.
    lasting = s.sign("client-1", "client-token", now=NOW)
    assert s.unsign(lasting, "client-token", now=NOW + 10 * 365 * 86_400) == "client-1"


def test_digests_are_namespaced_too() -> None:
    s = Signer(SECRET)
    assert s.digest("nonce", "dashboard-csrf") != s.digest("nonce", "telegram-webhook")
    assert s.digest("nonce", "dashboard-csrf") != Signer(b"other").digest("nonce", "dashboard-csrf")
    assert s.matches("nonce", "dashboard-csrf", s.hexdigest("nonce", "dashboard-csrf"))
    assert not s.matches("nonce", "telegram-webhook", s.hexdigest("nonce", "dashboard-csrf"))
    assert not s.matches("nonce", "dashboard-csrf", "é" * 64)
    assert not s.matches("nonce", "dashboard-csrf", None)
    assert equal("abc", "abc") and not equal("", "abc") and not equal("abd", "abc")
    with pytest.raises(ValueError, match="purpose"):
        s.digest("x", "Not A Purpose")
    with pytest.raises(ValueError, match="for digests only"):  # else one could pass for the other
        s.sign("x", "pseudonym")


def test_stored_pseudonyms_and_keys_are_what_they_were() -> None:
    """Values made by the code before the signer, for the same secret: a vote, an
    event's daily hash and the chain's signatures must go on matching the stored ones."""
    settings = Settings(secret_key=SecretStr(SECRET.decode()))
    assert user_ref(settings, "alice@example.com") == "ad8945d894e71dcbd11b3b97b47b8f24"
    assert SaltedHasher(SECRET).hash("session-1", date(2026, 5, 25)) == "ORYCDTKQ"
    assert chain_key(SECRET).hex() == (
        "862e1fb03770fe9f791163ec1dafd9b199b9fa3436aacc2162251513662df405"
    )
    assert Signer(SECRET).hexdigest(b"", "key-check")[:16] == "04bbcb73a1b1b48d"


def test_no_pseudonym_gives_away_a_stored_key() -> None:
    """A user id spelled like a stored purpose's label would have had that purpose's
    key as its pseudonym; it is hashed under the pseudonym's own label instead."""
    settings = Settings(secret_key=SecretStr(SECRET.decode()))
    chain = chain_key(SECRET).hex()
    assert user_ref(settings, "amelio.feedback.chain.v1") != chain[:32]
    salt = Signer(SECRET).digest("2026-05-25", "feedback-salt").hex()
    assert user_ref(settings, "amelio.feedback.salt.v1:2026-05-25") != salt[:32]
    # Nor a token's signature, for bytes that spell the token's label and body.
    body, mac = Signer(SECRET).sign("v", "client-token").rsplit(".", 1)
    crafted = b"\xffclient-token\x00" + body.encode()
    assert Signer(SECRET).digest(crafted, "pseudonym") != base64.urlsafe_b64decode(mac + "=")


def test_the_workspace_key_is_made_once_and_kept(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path)
    token = signer(settings).sign("v", "client-token")
    key_file = settings.data_dir / "secret_key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert secret_key(settings) == key_file.read_text().strip().encode()
    assert signer(Settings(workspace=tmp_path)).unsign(token, "client-token") == "v"
    assert reason(token, "client-token", key=b"configured elsewhere") == "signature"


def test_a_dashboard_session_is_refused_when_forged_expired_or_another_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(workspace=tmp_path)
    cookie = dump_session(settings, key_id=3, role="admin", name="ops")
    session = load_session(settings, cookie)
    assert session is not None and (session.key_id, session.role) == (3, "admin")
    assert valid_csrf(settings, session, csrf_token(settings, session))
    assert not valid_csrf(settings, session, signer(settings).hexdigest(session.nonce, "x-y"))
    client = signer(settings).sign('{"k":3,"r":"admin","n":"ops","x":"n"}', "client-token")
    for refused in (None, "", cookie[:-3], client, "e30.deadbeef"):
        assert load_session(settings, refused) is None
    later = time.time() + 12 * 3600 + 5
    monkeypatch.setattr("time.time", lambda: later)
    assert load_session(settings, cookie) is None
