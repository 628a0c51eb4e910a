"""Console views: function views, tenant-scoped through the user's principal.

Reads go through selectors, writes through the services (which audit); every
view names the least role it needs (console/access.py). Another tenant's
object is a 404, like a missing one. No GET changes state. No domain logic
here: previews, resume plans and history are dispatch/selectors/previews.py's, queue
depths dispatch/selectors/ops.py's.

One module per page group: dashboard, schedules, executions, explain, access
(session, tokens, members) and ops (platform operators).
"""
