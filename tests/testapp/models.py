from django.db import models, transaction
from django.db.models import F


class SideEffect(models.Model):
    """How many times a step body really ran, counted in the database so worker processes can add to it."""

    name = models.CharField(max_length=200, unique=True)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        # The permission the Refund workflow declares for its manager-approval event.
        permissions = [("approve_refund", "Can approve refunds")]

    @classmethod
    def bump(cls, name: str) -> int:
        # One transaction, so another connection never sees the name with its count still 0: a test
        # that waits for a body to have run, then kills its process, must not see it half-counted.
        with transaction.atomic():
            cls.objects.get_or_create(name=name)
            cls.objects.filter(name=name).update(count=F("count") + 1)
            return cls.objects.get(name=name).count

    @classmethod
    def counts(cls) -> dict:
        return dict(cls.objects.values_list("name", "count"))


class ReplayAudit(models.Model):
    """One replay as the engine's signals saw it: which process held which lease, from when to when."""

    instance_pk = models.BigIntegerField(db_index=True)
    epoch = models.BigIntegerField()
    pid = models.PositiveIntegerField()
    started = models.FloatField()
    released = models.FloatField(null=True)
    outcome = models.CharField(max_length=20, blank=True)
