"""The policy toolkit: test policies like code (`test`), find what cannot work (`lint`),
derive bands from trusted runs (`suggest`), read recipe docs (`import-recipe`) and
evaluate a policy in Prometheus (`export prometheus`).
Commands: gatekeeper/cli/{test,lint,suggest,import_recipe,export}.py.
"""
