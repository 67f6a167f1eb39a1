"""One object's download: its size and ETag found, its parts planned and fetched,
the bytes verified, the file published; and resuming one from an earlier attempt.

What it holds: what every download of one engine shares, handed down instead of the
engine (``context``); a download's input checked before anything is sent
(``jobs``); the download itself, top to bottom (``transfer``); how it learns the
object's size and ETag (``strategies``); fetching byte ranges and upload parts, with
retries that resume (``parts``); the ``validate`` policy, for a file and for a
stream (``verify``, ``stream_verify``); and continuing from a partial file
(``resume``).

What it may import: ``_files``, ``_wire`` and the public types at the top of the
package.

What it never does: import ``_reads``, ``_bulk`` or the engine (they use it, never
the reverse), or send a request except through ``_wire``'s sources.
"""
