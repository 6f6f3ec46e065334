"""This process's end of an isolation worker's socket: one thread writes, one reads.

The writer sends messages in order, off the caller's thread: the worker reads nothing while it
imports torch, and a job's arguments (often many MB) would block the send until then. The reader
answers the worker's one request at once (``share``: write the job's arguments into the buffers it
offers, ``transfer``), so the worker has them while this process is still compiling, and queues
every other reply for ``receive``. Both end
with the worker's socket.
"""

from __future__ import annotations

import pickle
import queue
import socket
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, Optional

from .isolate_worker import get

#: The threads' names: a fork may go on beside them (``fork_checks``), as they only move bytes
#: to and from a worker that a forked child knows nothing of.
SEND, READ = "tdp-isolation-send", "tdp-isolation-read"


class Channel:
    """``send`` messages (bytes, or a list of buffers sent back to back); ``receive`` replies.
    ``job()``: the current job's arguments (``transfer.Packed``), which a ``share`` asks for."""

    def __init__(self, ours: socket.socket, job: Callable[[], Any]) -> None:
        self.conn = Connection(ours.detach())
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.job = job
        self.shared_in = 0.0  # seconds the last ``share`` took to answer (for the report)
        self.answering = threading.Lock()
        threading.Thread(target=self._write, name=SEND, daemon=True).start()
        self.reader = threading.Thread(target=self._read, name=READ, daemon=True)
        self.reader.start()

    def send(self, message: Any) -> None:
        self.outbox.put(message)

    def quiet(self) -> None:
        """Wait for an answer being written into the worker's memory to end (before it is killed:
        memory unmapped under a copy is undefined behaviour in this process's context)."""
        with self.answering:
            pass

    def close(self) -> None:
        """After the worker is gone (its end closed, so the reader ends now)."""
        self.outbox.put(None)
        self.reader.join(2.0)  # before the fd number can be reused under it
        self.conn.close()

    def _write(self) -> None:
        while True:
            message = self.outbox.get()
            if message is None:
                return
            try:
                for part in message if isinstance(message, list) else [message]:
                    self.conn.send_bytes(part)
            except OSError:
                return  # the worker died: its owner finds out and starts another
            finally:
                message = None  # a job's bytes (views of the user's tensors) are not kept here

    def _read(self) -> None:
        while True:
            try:
                message = get(self.conn)
            except Exception:  # noqa: BLE001 - EOF, a closed socket, or a reply cut short by a crash
                self.inbox.put(("gone",))
                return
            if isinstance(message, tuple) and message and message[0] == "share":
                began = time.perf_counter()
                with self.answering:
                    try:
                        reply = self.answer(message[1] if len(message) > 1 else None)
                    except Exception as exc:  # noqa: BLE001 - the worker drops the job and says why
                        reply = abort(f"its arguments could not be sent ({type(exc).__name__}: {exc})")
                    self.send(reply)
                    reply = None
                self.shared_in = time.perf_counter() - began
            else:
                self.inbox.put(message)

    def answer(self, offers: Any) -> list:
        """The job's CUDA tensors written into the buffers the worker offers (from this thread)."""
        packed = self.job()
        if packed is None:  # the tuning ended: nothing to write, and nothing for it to run
            return abort("the tuning it was for has ended")
        return filled(*packed.answer(offers))

    def receive(self, limit: float, alive: Callable[[], bool]) -> Optional[tuple]:
        """The worker's next reply; ``("gone",)`` once its end closed or it died; None after
        ``limit`` seconds."""
        deadline = time.monotonic() + limit
        while True:
            try:
                return self.inbox.get(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
            except queue.Empty:
                pass
            if not alive():  # a last reply may still be on its way through the reader
                self.reader.join(1.0)
                try:
                    return self.inbox.get_nowait()
                except queue.Empty:
                    return ("gone",)
            if time.monotonic() >= deadline:
                return None


def filled(left: list[int], buffers: list) -> list:
    """The reply to ``share``: which shared tensors come as bytes instead, and their bytes."""
    return [pickle.dumps(("filled", left, [b.nbytes for b in buffers])), *buffers]


def abort(reason: str) -> list:
    """The reply to a ``share`` that cannot be answered: the worker drops its job, saying why."""
    return [pickle.dumps(("filled", None, [], reason))]
