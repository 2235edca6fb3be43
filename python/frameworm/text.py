"""Text a Python entrypoint sends in a proto3 string field: bounded in
bytes, and valid UTF-8 (the coordinator refuses a longer field, and a peer
drops a message whose string is not UTF-8). No dependencies."""


def cut_utf8(text, max_bytes):
    """`text` as UTF-8, cut to at most `max_bytes` bytes, never inside a
    character; characters that cannot be encoded (lone surrogates) become
    '?'."""
    return text.encode("utf-8", "replace")[:max_bytes].decode("utf-8", "ignore")
