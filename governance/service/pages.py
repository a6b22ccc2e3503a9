"""The service's own pages: the login form and the logout button, self-contained (no script, no
asset to load before a session exists)."""

from __future__ import annotations

from html import escape
from string import Template

_PAGE = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>$title · Custody</title>
<style>
body{font-family:system-ui,sans-serif;background:#f5f6f8;color:#1d2330;display:grid;place-items:center;min-height:90vh}
main{background:#fff;border:1px solid #d8dce3;border-radius:8px;padding:2rem 2.5rem;width:22rem}
h1{font-size:1.3rem;margin:0 0 .3rem}p{margin:.3rem 0 1rem;color:#4a5366}
label{display:block;font-size:.9rem;margin:.8rem 0 .2rem}
input[type=text],input[type=password]{width:100%;box-sizing:border-box;padding:.5rem;border:1px solid #b9c0cc;border-radius:4px}
button{margin-top:1.2rem;width:100%;padding:.6rem;border:0;border-radius:4px;background:#2f5bd3;color:#fff;font-size:1rem}
.problem{background:#fdecec;border:1px solid #e5a5a5;color:#8a1c1c;padding:.5rem;border-radius:4px}
</style></head>
<body><main>$body</main></body></html>
""")


def login_page(csrf: str, next_path: str, problem: str | None = None, user: str = "") -> str:
    shown = f'<p class="problem" role="alert">{escape(problem)}</p>' if problem else ""
    body = f"""<h1>Sign in to Custody</h1><p>With your directory account.</p>{shown}
<form method="post" action="/login">
<input type="hidden" name="csrf" value="{escape(csrf)}"><input type="hidden" name="next" value="{escape(next_path)}">
<label for="user">User</label><input type="text" id="user" name="user" value="{escape(user)}" autocomplete="username" required autofocus>
<label for="password">Password</label><input type="password" id="password" name="password" autocomplete="current-password" required>
<button type="submit">Sign in</button></form>"""
    return _PAGE.substitute(title="Sign in", body=body)


def logout_page(csrf: str, user: str) -> str:
    body = f"""<h1>Sign out</h1><p>Signed in as <b>{escape(user)}</b>.</p>
<form method="post" action="/logout"><input type="hidden" name="csrf" value="{escape(csrf)}">
<button type="submit">Sign out</button></form>"""
    return _PAGE.substitute(title="Sign out", body=body)
