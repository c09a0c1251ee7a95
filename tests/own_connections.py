"""A connection of a test's own to the test database, beside Django's: to hold a lock, kill a backend or
look at ``pg_locks`` from outside the connection under test."""

from django.db import connection


def dsn() -> dict:
    """The test database's connection parameters, as ``psycopg.connect`` takes them."""
    params = connection.get_connection_params()
    return {key: params[key] for key in ("dbname", "user", "host", "port", "password") if params.get(key)}
