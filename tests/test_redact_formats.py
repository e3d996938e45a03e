"""Secret formats found missing by an audit of the shards: the AWS secret key beside its key id, provider tokens
without a keyword, Azure SAS signatures and passwords that command lines take without a ``--password`` flag.

Each planted case must come out exactly as expected; each look-alike must come back byte-identical. Secret-shaped
strings are assembled from pieces at run time so this file itself holds no token a scanner would flag.
"""

from __future__ import annotations

from collections import Counter

import pytest

from stages.redact import redact_text


def _j(*parts: str) -> str:
    return "".join(parts)


AWS_ID = _j("AK", "IA", "Q3XAMPLE7KEY2ID4")
AWS_SECRET = _j("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY")  # 40 characters, as AWS makes them

AWS = [
    (f"$ aws configure\nAWS Access Key ID [None]: {AWS_ID}\nAWS Secret Access Key [None]: {AWS_SECRET}\n"
     "Default region name [None]: us-east-1",
     "$ aws configure\nAWS Access Key ID [None]: <SECRET:aws_access_key>\nAWS Secret Access Key [None]: "
     "<SECRET:aws_secret_key>\nDefault region name [None]: us-east-1"),
    # run again: the prompts show masked old values, and only the secret is typed anew
    ("AWS Access Key ID [****************MPLE]: \nAWS Secret Access Key [****************EKEY]: " + AWS_SECRET,
     "AWS Access Key ID [****************MPLE]: \nAWS Secret Access Key [****************EKEY]: <SECRET:aws_secret_key>"),
    (f"Use key {AWS_ID} / {AWS_SECRET} for the demo.", "Use key <SECRET:aws_access_key> / <SECRET:aws_secret_key> for the demo."),
    (f"I created the key {AWS_ID} and its secret {AWS_SECRET}.",
     "I created the key <SECRET:aws_access_key> and its secret <SECRET:aws_secret_key>."),
    (f"Access key ID,Secret access key\n{AWS_ID},{AWS_SECRET}\n",
     "Access key ID,Secret access key\n<SECRET:aws_access_key>,<SECRET:aws_secret_key>\n"),
    (f"secret {AWS_SECRET} belongs to {AWS_ID}", "secret <SECRET:aws_secret_key> belongs to <SECRET:aws_access_key>"),
    (f"aws configure set aws_secret_access_key {AWS_SECRET}", "aws configure set aws_secret_access_key <SECRET:aws_secret_key>"),
    (f"aws configure set profile.dev.aws_secret_access_key '{AWS_SECRET}' && ls",
     "aws configure set profile.dev.aws_secret_access_key '<SECRET:aws_secret_key>' && ls"),
]
AWS_LOOKALIKES = [
    "AWS Secret Access Key [None]: \nDefault region name [None]: us-east-1",
    "Enter the Secret Access Key: it is shown once, in the IAM console.",
    "      Name                    Value             Type    Location\n"
    "access_key     ****************MPLE shared-credentials-file\nsecret_key     ****************EKEY shared-credentials-file",
    "aws configure set aws_secret_access_key $AWS_SECRET_ACCESS_KEY",
]


@pytest.mark.parametrize(("text", "expected"), AWS, ids=[c[1][:40] for c in AWS])
def test_an_aws_secret_key_beside_its_key_id_or_in_its_prompt_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert sum(counts.values()) == expected.count("<SECRET:")


@pytest.mark.parametrize("text", AWS_LOOKALIKES, ids=[t[:30] for t in AWS_LOOKALIKES])
def test_an_aws_lookalike_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


def test_only_a_generated_looking_run_near_a_key_id_is_taken_for_its_secret():
    digest = "3f786850e387550fdab836ed7e6dc881de23001b"  # a git SHA: 40 characters too, but hex
    words = "ThisIsFortyCharactersOfCamelCaseLettersX"
    far = f"{AWS_ID}\n" + "log line\n" * 30 + AWS_SECRET
    for text in (f"key {AWS_ID} commit {digest}", f"key {AWS_ID} then {words}", far, f"{AWS_ID}\n\x00\n{AWS_SECRET}"):
        out, counts = redact_text(text)
        assert counts == Counter(aws_access_key=1), text
        assert AWS_ID not in out and out.replace("<SECRET:aws_access_key>", AWS_ID) == text
