"""The labels, named once: the classes that are not keywords, and the label lists every model's
class count derives from."""
SILENCE = "_silence_"                     # the label of clips with no speech
UNKNOWN = "_unknown_"                     # the label of words the model does not spot
OTHER = "_other_"                         # an enrolled model's label for everything but its phrase
NOT_KEYWORDS = (SILENCE, UNKNOWN, OTHER)  # labels that never fire a detection

KWS_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
KWS12_LABELS = KWS_WORDS + (UNKNOWN, SILENCE)    # the keyword-spotting protocol (12 classes)
SC35_LABELS = (                                  # every Speech Commands v0.02 word (the paper)
    "backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward",
    "four", "go", "happy", "house", "learn", "left", "marvin", "nine", "no", "off", "on", "one",
    "right", "seven", "sheila", "six", "stop", "three", "tree", "two", "up", "visual", "wow",
    "yes", "zero")
SC36_LABELS = SC35_LABELS + (SILENCE,)            # every word told apart, and noise (a backbone tried
                                                 # for enroll: training/configs/sc36.yaml)
TASKS = {"kws12": KWS12_LABELS, "sc35": SC35_LABELS, "sc36": SC36_LABELS}


def task_labels(task: str) -> tuple[str, ...]:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: expected one of {sorted(TASKS)}")
    return TASKS[task]
