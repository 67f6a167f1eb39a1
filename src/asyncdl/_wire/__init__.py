"""The wire: requests to S3 (or to a URL) and their answers, one request at a time.

What it holds: one object's HEAD and GET requests, S3's and a plain URL's
(``s3_source``, ``url_source``), each holding a slot of the engine's budget and
counted; an open GET's answer (``get_response``) and its body, read as the network
delivered it under a stall watch (``body_reader``); S3's XML answers read cheaply
(``answer_parsing``); ListObjectsV2 page by page (``list_objects``); the arguments a
caller may pass (``request_args``); byte ranges as HTTP spells them (``ranges``);
S3's checksums and computing them (``checksums``, ``running_checksum``); the lean
GET path: templates, SigV4 and sending (``signed_get``, ``sigv4``, ``lean_send``);
the client, the settings it is made with and the URL session (``clients``,
``client_settings``, ``url_session``); which failures are
retried and when (``retry``); and the pacing: the budget with its adaptive limit
(``adaptive``) and the bandwidth cap (``bandwidth``).

What it may import: its own modules and the public types at the top of the package
(``config``, ``errors``, ``progress``, ``stats``).

What it never does: touch a file on disk (``_files``), plan or check a download
(``_transfer``), or import any layer above it or the engine. It sends and reads
requests; what to ask for is decided above it.
"""
