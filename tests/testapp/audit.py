import os

from tests.testapp.models import ReplayAudit


def started(sender, instance_pk, epoch, started, **kwargs):
    ReplayAudit.objects.create(instance_pk=instance_pk, epoch=epoch, pid=os.getpid(), started=started)


def finished(sender, instance_pk, epoch, outcome, released, **kwargs):
    ReplayAudit.objects.filter(instance_pk=instance_pk, epoch=epoch).update(released=released, outcome=outcome)
