"""The client's exceptions: one base class, AttndError, for everything a call
can fail with (an HTTP error status, no connection, input attnd would refuse)."""

from __future__ import annotations

from typing import Optional, Union


class AttndError(Exception):
    """A call to attnd failed.

    Attributes:
        status: the HTTP status attnd answered (400, 401, 404, 413, 503, ...);
            None when no answer arrived (AttndConnectionError) or nothing was
            sent (AttndInputError).
        message: attnd's own text, the "error" member of its JSON error body
            (or the start of the body when it is not JSON), or what went wrong
            on the client's side.
        retry_after: seconds from the Retry-After header (503s; an
            HTTP-date counted from now), else None.
        body: the raw response body (b"" when there was none).
        tries: how many times the call was sent (1 plus its retries, 0 for
            input refused before sending); the exception's text ends with
            "(after N tries)" when N > 1.
    """

    def __init__(self, status: Optional[int], message: str,
                 retry_after: Optional[float] = None,
                 body: Union[bytes, bytearray, memoryview] = b"") -> None:
        super().__init__(message if status is None else "HTTP %d: %s" % (status, message))
        self.status = status
        self.message = message
        self.retry_after = retry_after
        # bytes of its own: the transports may read an answer into a buffer
        # (answer_buffer) that the error must not keep or see change
        self.body = body if isinstance(body, bytes) else bytes(body)
        self.tries = 1

    def _tried(self, tries: int) -> "AttndError":
        """Records how many tries the call made, in .tries and the text."""
        self.tries = tries
        text = self.message if self.status is None else "HTTP %d: %s" % (self.status,
                                                                          self.message)
        if tries > 1:
            text += " (after %d tries)" % tries
        self.args = (text,)
        return self


class AttndConnectionError(AttndError):
    """No answer: the connection could not be made, broke, or timed out.
    status is None; the OSError is the exception's __cause__.
    before_answer: True when no byte of an answer had arrived and the
    failure was not a read timeout (the server never saw the request or
    never started answering): such a call may be sent again."""

    def __init__(self, message: str, before_answer: bool = False) -> None:
        super().__init__(None, message)
        self.before_answer = before_answer


class AttndInputError(AttndError, ValueError):
    """The client refused a tensor before sending it (ragged nesting, NaN or
    infinity, a number out of the datatype's range, a wrong element type).
    The message is worded as attnd words the same refusal (attnd would
    answer it with a 400); nothing was sent, so status is None and tries 0."""

    def __init__(self, message: str) -> None:
        super().__init__(None, message)
        self.tries = 0
