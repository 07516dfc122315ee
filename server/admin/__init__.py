"""`brain-admin`: the operator's command line (keys, migrations, audit, backups, embeddings, TLS).

Sub-commands register themselves with `brain.server.admin.registry`; `main` lives in
`brain.server.admin.main`.
"""
