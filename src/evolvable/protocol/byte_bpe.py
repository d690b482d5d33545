"""The GPT-2 byte-level BPE alphabet, shared by everything that reads engine token ids as bytes
(the policy server's logprobs entries, governance's token-id redaction)."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def unicode_to_byte() -> dict[str, int]:
    """Inverse of the byte-level BPE alphabet (every byte is drawn as one printable character)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes, strict=True)}
