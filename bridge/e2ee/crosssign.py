"""Cross-signing for one identity of the bridge: a master key, a self-signing key and a
user-signing key (ed25519), made once and kept beside the device (mode 0600); the master key is
uploaded without interactive auth (MSC3967: a user's first cross-signing keys need none), and
the self-signing key signs the identity's device, so clients see the device as verified by its
owner — no red shield on agent messages, and no keys withheld under "exclude insecure devices".

ed25519 comes from pycryptodome, which matrix-nio already depends on (vodozemac's Python
bindings sign only with an Olm account's own key).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from Crypto.PublicKey import ECC
from Crypto.Signature import eddsa

USAGES = ("master", "self_signing", "user_signing")


def b64(data: bytes) -> str:
    """Unpadded standard base64, as Matrix writes keys and signatures."""
    return base64.b64encode(data).decode("ascii").rstrip("=")


def unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def canonical(obj: Any) -> bytes:
    """Matrix canonical JSON of `obj` without its `signatures` and `unsigned` (what is signed)."""
    if isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if k not in ("signatures", "unsigned")}
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


class SigningKey:
    """An ed25519 key pair from its 32-byte seed."""

    def __init__(self, seed: bytes):
        self.seed = seed
        self._key = ECC.construct(curve="Ed25519", seed=seed)
        self.public = b64(self._key.public_key().export_key(format="raw"))

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(ECC.generate(curve="Ed25519").seed)

    def sign(self, obj: dict) -> str:
        return b64(eddsa.new(self._key, "rfc8032").sign(canonical(obj)))


def verify(obj: dict, public: str, signature: str) -> bool:
    """Whether `signature` (unpadded base64) is `public`'s ed25519 signature of `obj`."""
    try:
        key = eddsa.import_public_key(unb64(public))
        eddsa.new(key, "rfc8032").verify(canonical(obj), unb64(signature))
        return True
    except (ValueError, TypeError):
        return False


def add_signature(obj: dict, user_id: str, key: SigningKey) -> dict:
    """`obj` signed by `key` (as `ed25519:<public>` of `user_id`), beside its other signatures."""
    signature = key.sign(obj)
    signatures = {u: dict(s) for u, s in (obj.get("signatures") or {}).items()}
    signatures.setdefault(user_id, {})[f"ed25519:{key.public}"] = signature
    return {**obj, "signatures": signatures}


class CrossSigning:
    """The three keys of one user, from seeds (base64) or made anew."""

    def __init__(self, user_id: str, seeds: dict[str, str] | None = None):
        self.user_id = user_id
        seeds = seeds or {}
        self.keys = {
            usage: SigningKey(unb64(seeds[usage])) if usage in seeds else SigningKey.generate() for usage in USAGES
        }

    def seeds(self) -> dict[str, str]:
        return {usage: b64(key.seed) for usage, key in self.keys.items()}

    def key_object(self, usage: str) -> dict:
        key = self.keys[usage]
        obj = {"user_id": self.user_id, "usage": [usage], "keys": {f"ed25519:{key.public}": key.public}}
        if usage != "master":
            obj = add_signature(obj, self.user_id, self.keys["master"])
        return obj

    def upload_body(self) -> dict:
        """POST /keys/device_signing/upload."""
        return {
            "master_key": self.key_object("master"),
            "self_signing_key": self.key_object("self_signing"),
            "user_signing_key": self.key_object("user_signing"),
        }

    def sign_device(self, device_keys: dict) -> dict:
        """The device's keys (as /keys/query shows them) signed by the self-signing key."""
        signed = add_signature(
            {k: v for k, v in device_keys.items() if k != "unsigned"}, self.user_id, self.keys["self_signing"]
        )
        return signed
