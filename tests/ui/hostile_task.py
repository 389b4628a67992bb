"""A task whose output is hostile to a web page: markup, terminal escapes, invalid UTF-8,
a NUL byte and a 10 MB line; then it fails, so the same text is in the root cause."""
import sys

out = sys.stdout.buffer
out.write(b"<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned=2\">\n")
out.write(b"\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J cleared\n")
out.write(b"bad utf-8: \xff\xfe\xc3\x28 nul:\x00 end\n")
out.write(b"A" * (10 * 1024 * 1024) + b"\n")
out.write(b"after the long line\n")
out.write(b"</pre><script>window.__pwned = 3</script>\n")
out.flush()
sys.exit(4)
