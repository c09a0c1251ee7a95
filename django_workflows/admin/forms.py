"""The admin's two forms: a decision on an approval, and an event sent by hand."""

from __future__ import annotations

import json

from django import forms


class DecisionForm(forms.Form):
    outcome = forms.ChoiceField(choices=[("approved", "Approve"), ("rejected", "Reject")])
    comment = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    # The wait the person saw: if the instance has moved on to another wait since, the decision is not
    # sent to that one.
    step = forms.CharField(max_length=300, widget=forms.HiddenInput)


class SendEventForm(forms.Form):
    type = forms.CharField(label="Event type", max_length=100)
    payload = forms.CharField(
        label="Payload (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="Any JSON value; empty sends null.",
    )

    def clean_payload(self):
        text = self.cleaned_data["payload"].strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError as exc:  # JSONDecodeError, and an integer of more than 4,300 digits
            raise forms.ValidationError(f"The payload is not valid JSON: {exc}") from None
        except RecursionError:
            raise forms.ValidationError("The payload is nested too deeply.") from None
