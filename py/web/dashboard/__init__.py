"""The operator dashboard: server-rendered pages over the API's own handlers.

Pages are data (``routes.DASHBOARD_PAGES``) mounted by ``page.mount_pages``; each reads and
acts through ``codity.web.invoke`` with the signed-in user as the principal, so the
dashboard has no path to the tables that the API lacks. Templates are Jinja2 (autoescaped,
``templates/``); the only scripts are vendored htmx and ``static/dashboard.js`` (no inline
script: the pages run under ``script-src 'self'``).
"""
