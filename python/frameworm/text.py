"""Text a Python entrypoint sends in a proto3 string field: bounded in
bytes, and valid UTF-8 (the coordinator refuses a longer field, and a peer
drops a message whose string is not UTF-8). No dependencies."""


def cut_utf8(text, max_bytes):
    """`text` as UTF-8, cut to at most `max_bytes` bytes, never inside a
    character; characters that cannot be encoded (lone surrogates) become
    '?'."""
    return text.encode("utf-8", "replace")[:max_bytes].decode("utf-8", "ignore")


# What gRPC's own UNIMPLEMENTED (sent without a message) means here.
BARE_UNIMPLEMENTED = ("the server does not have this call (an older version?) or could not "
                      "parse the request (too many entries or malformed; its log says which)")


def error_text(code, message):
    """The message of a refused call with status `code` (its name): the
    server's, or for gRPC's bare UNIMPLEMENTED what that means."""
    if not message and code == "UNIMPLEMENTED":
        return BARE_UNIMPLEMENTED
    return message
