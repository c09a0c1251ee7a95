# What the inbox has been sent moves to a table of its own, which a restart does not touch: a restart
# deletes the events it takes back, and with them went the signatures and idempotency keys that had
# stored them, so the same signed bytes were taken again after it.
#
# Each event's old ``delivery`` is copied twice: as it was (a webhook's signature: posted again, it is
# still refused) and as the key of its sender's channel (a key: a repeat across the upgrade still
# answers with the first event), since the old column did not say which of the two it held. The copy
# that does not apply is a digest no request will ever produce again.

import hashlib
import json

import django.db.models.deletion
from django.db import migrations, models

BATCH = 1000


def _channel(sender):
    # Event.sender is "<channel>:<who>", or "" for trusted Python code.
    return sender.split(":", 1)[0] if ":" in sender else "python"


def _digest(payload):
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def copy_deliveries(apps, schema_editor):
    Event = apps.get_model("django_workflows", "Event")
    Delivery = apps.get_model("django_workflows", "Delivery")
    alias = schema_editor.connection.alias
    events = (Event.objects.using(alias).filter(delivery__isnull=False).order_by("pk")
              .values_list("pk", "instance_id", "type", "payload", "sender", "received_at", "delivery"))
    rows = []
    for pk, instance_id, event_type, payload, sender, received_at, delivery in events.iterator(chunk_size=BATCH):
        keyed = hashlib.sha256(f"idempotency:{_channel(sender)}:{delivery}".encode()).hexdigest()
        for key in (delivery, keyed):
            rows.append(Delivery(key=key, instance_id=instance_id, event_id=pk, type=event_type,
                                 payload_digest=_digest(payload), received_at=received_at))
        if len(rows) >= BATCH:
            Delivery.objects.using(alias).bulk_create(rows)
            rows = []
    Delivery.objects.using(alias).bulk_create(rows)


class Migration(migrations.Migration):

    dependencies = [
        ('django_workflows', '0019_instance_progressed_at'),
    ]

    operations = [
        migrations.CreateModel(
            name='Delivery',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(editable=False, help_text='A digest of the signature, or of the channel, instance and key.', max_length=64, unique=True)),
                ('event_id', models.BigIntegerField(help_text='The event it stored; a restart may have deleted it since.')),
                ('type', models.CharField(max_length=100)),
                ('payload_digest', models.CharField(help_text='A digest of the payload as canonical JSON.', max_length=64)),
                ('received_at', models.DateTimeField()),
                ('instance', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deliveries', to='django_workflows.instance')),
            ],
        ),
        migrations.RunPython(copy_deliveries, migrations.RunPython.noop, elidable=True),
        # Event.delivery stays for one release: servers still on the previous one write it during a
        # rolling deploy (models.Event says more).
    ]
