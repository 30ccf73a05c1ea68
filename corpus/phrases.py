"""A wake phrase as text: what `rotkws enroll` and the demo's enroll tab accept (no torch)."""

MAX_PHRASE_CHARS = 40            # a wake phrase is a few words; longer text is a sentence


class PhraseError(ValueError):
    """A phrase that cannot be a wake word: the message says why, on one line."""


def normalize_phrase(text: str) -> str:
    """Whitespace collapsed, ends stripped: the label the model will carry."""
    return " ".join(str(text or "").split())


def check_text(text: str) -> str:
    """The normalised phrase, or PhraseError: empty, no letter or digit, or too long."""
    phrase = normalize_phrase(text)
    if not phrase:
        raise PhraseError("the phrase is empty: give the words to listen for, e.g. \"hey computer\"")
    if not any(c.isalnum() for c in phrase):
        raise PhraseError(f"the phrase {phrase!r} has no letter or digit: nothing to say")
    if len(phrase) > MAX_PHRASE_CHARS:
        raise PhraseError(f"the phrase is {len(phrase)} characters long; a wake phrase has at most "
                          f"{MAX_PHRASE_CHARS}")
    return phrase
