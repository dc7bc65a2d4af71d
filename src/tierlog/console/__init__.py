"""``tierlog console``: a web console for a tierlog cluster (docs/console.md).

``views`` reads what each page shows through tierlog's own client and the brokers' HTTP endpoints (the
same :mod:`tierlog.tools` functions the commands use); ``app`` serves the JSON API and the page's assets on
the broker's HTTP server class, with its bind and token rules; ``server`` runs it until stopped;
``static/`` is the page itself (Preact and htm as vendored ES modules, no build step; see
scripts/console_assets.py).
"""
