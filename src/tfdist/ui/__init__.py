"""The dashboard (``tfdist ui``): every job of the job store in a browser, its tasks, the
timeline of their attempts, the root cause, each task's log followed live, and the training
curves. An optional extra (``pip install 'tfdist[ui]'``): ``import tfdist`` and ``tfdist run``
never import it or its web stack.

- :mod:`.app` the ASGI application (Starlette): routes, templates, live updates by
  server-sent events;
- :mod:`.auth` the token every request needs, and the CSRF-safe form token of ``stop`` and ``resubmit``;
- :mod:`.files` a run directory's files read for a browser (never outside it, never through
  a link, never whole);
- :mod:`.text` task output made safe and readable (escapes, invalid UTF-8, huge lines);
- :mod:`.views` pure functions from records to what a page shows (rows, timeline, curves);
- :mod:`.server` uvicorn on loopback by default, printing the URL with its token.
"""
