"""The django-q2 cluster's configuration: the embedded default, and the broker it names.

A project that sets no ``Q_CLUSTER`` runs on the ORM broker of its own database with the
recommended settings, so a fresh project needs no Redis and no django-q2 knowledge. django-q2
reads ``settings.Q_CLUSTER`` once, when ``django_q.conf`` is first imported (while Django imports
the app configs in ``INSTALLED_APPS`` order); the default is written into the settings before that
when ``django_workflows`` is listed before ``django_q``. Listed after it, django-q2 has read an
empty configuration (and warned about it), so its ``Conf`` is built again from the default.

A project that sets ``Q_CLUSTER`` keeps it exactly as written: nothing is merged into it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings

from django.conf import settings

ORM_BROKER = "django_workflows.executors.broker.ORMBroker"

#: ``Q_CLUSTER`` when the project sets none (the recommended settings of docs/how-to/production-postgresql.md).
RECOMMENDED = {
    "name": "workflows",
    "orm": "default",  # the workflow tables' database, once the routers can be asked (install_broker_alias)
    "broker_class": ORM_BROKER,
    "workers": 4,
    "timeout": 900,
    "retry": 960,
    "ack_failures": True,
    "save_limit": -1,
    "queue_limit": 8,
    "poll": 0.1,
    "catch_up": False,
    "log_level": "WARNING",  # django-q2 logs every enqueue at INFO, in the web process too
}

#: Whether this process runs on the default (the project set no Q_CLUSTER).
installed = False
#: Whether django-q2 had read its configuration before the default was written (a check warns).
read_too_early = False


def q_cluster() -> dict:
    return getattr(settings, "Q_CLUSTER", None) or {}


def install_default() -> None:
    """Give django-q2 the recommended configuration unless the project has its own."""
    global installed, read_too_early
    if getattr(settings, "Q_CLUSTER", None):
        return
    settings.Q_CLUSTER = dict(RECOMMENDED)
    installed = True
    if "django_q.conf" in sys.modules:
        read_too_early = True
        _rebuild_django_q_conf()


def install_broker_alias(alias: str) -> None:
    """Point the default's ORM broker at the workflow tables' database (known once models are loaded),
    so a replay's task commits in the transaction that made its instance runnable."""
    if installed and settings.Q_CLUSTER.get("orm") != alias:
        settings.Q_CLUSTER["orm"] = alias
        _rebuild_django_q_conf()


def _rebuild_django_q_conf() -> None:
    """Build django-q2's ``Conf`` again from the settings, in place.

    Every module of django-q2 holds the one ``Conf`` class it imported, so the class is updated
    rather than replaced: its module's code runs again in a scratch module, and the settings it
    derives are copied over.
    """
    from django_q.conf import Conf

    spec = importlib.util.find_spec("django_q.conf")
    # Found: Conf was imported from it just above.
    assert spec is not None and spec.loader is not None
    scratch = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its warnings were about the empty configuration, if any
        spec.loader.exec_module(scratch)
    for name, value in vars(scratch.Conf).items():
        if name == "conf" or name.isupper():
            setattr(Conf, name, value)


def broker_module(conf: dict) -> str:
    """The module django-q2 imports for the broker ``conf`` names, in django-q2's own order of preference
    (``django_q.brokers.get_broker``); with no broker named, django-q2 uses Redis."""
    if conf.get("broker_class"):
        return str(conf["broker_class"]).rpartition(".")[0]
    if conf.get("iron_mq"):
        return "django_q.brokers.ironmq"
    if isinstance(conf.get("sqs"), dict):
        return "django_q.brokers.aws_sqs"
    if conf.get("orm"):
        return "django_q.brokers.orm"
    if conf.get("mongo"):
        return "django_q.brokers.mongo"
    return "django_q.brokers.redis_broker"


def missing_broker_package(conf: dict | None = None) -> str | None:
    """A one-line message naming the package the configured broker needs and cannot import, or None."""
    conf = q_cluster() if conf is None else conf
    modules = [broker_module(conf)]
    if conf.get("django_redis") and not conf.get("broker_class"):
        modules.append("django_redis")
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            if module == modules[0] and conf.get("broker_class"):
                return (f"Q_CLUSTER's broker_class {conf['broker_class']!r} cannot be imported: {exc}. "
                        "Correct the dotted path, or remove Q_CLUSTER to use the ORM broker on your database.")
            package = exc.name or module
            extra = " (or pip install 'django-durable-workflows[redis]')" if package == "redis" else ""
            return (f"Q_CLUSTER's broker needs the {package!r} package, which is not installed: "
                    f"pip install {package}{extra}, or remove Q_CLUSTER to use the ORM broker on your database.")
    return None


def list_key(queue: str) -> str:
    """The django-q2 list that the replays of ``queue`` are enqueued on: the cluster's own for the
    default queue (as before there were queues), ``<cluster name>.<queue>`` for another."""
    from django_q.conf import Conf

    return Conf.CLUSTER_NAME if queue == "default" else f"{Conf.CLUSTER_NAME}.{queue}"
