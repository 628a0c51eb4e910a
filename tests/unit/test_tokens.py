from tenants import tokens


def test_generated_token_has_recognisable_prefix_and_only_digest_is_derived() -> None:
    new = tokens.generate()
    assert new.raw.startswith(new.prefix + "_")
    assert new.prefix.startswith("sched_") and len(new.prefix) == len("sched_") + 8
    assert new.digest == tokens.digest(new.raw)
    assert new.raw not in new.digest and len(new.digest) == 64
    assert tokens.looks_like_token(new.raw)


def test_tokens_are_unique_and_malformed_ones_are_rejected_before_lookup() -> None:
    assert len({tokens.generate().raw for _ in range(200)}) == 200
    for bad in [
        "",
        "sched_",
        "Bearer x",
        "sched_ABCDEFGH_" + "a" * 40,
        "sched_abcd1234_short",
        "x" * 60,
    ]:
        assert not tokens.looks_like_token(bad)
