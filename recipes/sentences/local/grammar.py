"""A stochastic grammar of everyday spoken sentences: commands, questions and descriptions.

The grammar is a table of rules, ``NAME -> alternative | alternative ...``. An alternative is a
sequence of words, references to other rules (``$NAME``) and optional parts in brackets
(``[please]``, taken with probability 1/2); a leading ``N:`` gives it weight N (default 1).
Nouns come in singular/plural pairs so that number agrees ("the red box is", "three red boxes
are"). Every word is a lower-case word with an entry in the CMU Pronouncing Dictionary, which
``prepare_lang.py`` checks.

    >>> g = Grammar()
    >>> g.sample(np.random.default_rng(0))        # doctest: +SKIP
    'please move the red box to the left of the lamp'

Usage as a script: grammar.py [--vocab] [--num N] [--seed S] prints N sentences, or the
vocabulary (one word per line).
"""

from __future__ import annotations

import argparse
import re
import sys

import numpy as np

# (singular, plural) household objects
OBJECTS = [
    ("box", "boxes"), ("ball", "balls"), ("cup", "cups"), ("book", "books"), ("chair", "chairs"),
    ("table", "tables"), ("lamp", "lamps"), ("bottle", "bottles"), ("bag", "bags"),
    ("key", "keys"), ("phone", "phones"), ("plate", "plates"), ("bowl", "bowls"),
    ("glass", "glasses"), ("shoe", "shoes"), ("hat", "hats"), ("coat", "coats"), ("pen", "pens"),
    ("letter", "letters"), ("picture", "pictures"), ("clock", "clocks"), ("apple", "apples"),
    ("banana", "bananas"), ("sandwich", "sandwiches"), ("cake", "cakes"),
    ("flower", "flowers"), ("block", "blocks"), ("toy", "toys"), ("basket", "baskets"),
    ("jar", "jars"), ("knife", "knives"), ("spoon", "spoons"), ("fork", "forks"),
    ("towel", "towels"), ("pillow", "pillows"), ("blanket", "blankets"), ("candle", "candles"),
    ("mirror", "mirrors"), ("radio", "radios"), ("camera", "cameras"),
    ("computer", "computers"), ("ticket", "tickets"), ("umbrella", "umbrellas"),
    ("wallet", "wallets"), ("bucket", "buckets"), ("brush", "brushes"), ("map", "maps"),
    ("sock", "socks"), ("jacket", "jackets"), ("pencil", "pencils"), ("envelope", "envelopes"),
    ("package", "packages"), ("cushion", "cushions"), ("carpet", "carpets"), ("shelf", "shelves"),
    ("drawer", "drawers"), ("cookie", "cookies"), ("egg", "eggs"), ("potato", "potatoes"),
    ("tomato", "tomatoes"),
]
COLORS = ["red", "green", "blue", "yellow", "black", "white", "orange", "purple", "pink",
          "brown", "gray", "silver", "golden"]
SIZES = ["big", "small", "large", "little", "tiny", "huge", "heavy", "light", "old", "new",
         "empty", "broken", "clean", "dirty"]
ROOMS = ["kitchen", "bedroom", "bathroom", "garage", "garden", "office", "hallway", "basement",
         "attic", "closet", "living room", "dining room", "car", "yard"]
PLACES = ["library", "station", "airport", "school", "hospital", "store", "market", "bank",
          "restaurant", "hotel", "museum", "church", "beach", "park", "bakery", "pharmacy",
          "post office", "theater", "stadium", "gym"]
SPOTS = ["table", "desk", "floor", "shelf", "bed", "sofa", "counter", "chair", "window",
         "door", "stove", "sink", "fridge", "couch", "wall", "corner"]
CITIES = ["boston", "chicago", "denver", "seattle", "dallas", "houston", "atlanta", "phoenix",
          "portland", "miami", "austin", "detroit", "london", "paris", "berlin", "rome",
          "madrid", "tokyo", "toronto", "montreal", "philadelphia", "baltimore", "washington",
          "nashville", "memphis", "orlando", "pittsburgh", "cleveland", "buffalo", "dublin",
          "vienna", "prague", "moscow", "sydney", "new york", "san francisco",
          "los angeles", "las vegas"]
NAMES = ["john", "mary", "david", "sarah", "michael", "anna", "james", "emma", "robert",
         "linda", "peter", "susan", "thomas", "laura", "paul", "karen", "george", "helen",
         "daniel", "alice", "kevin", "nancy", "steven", "julia", "frank", "rachel", "henry",
         "grace", "oscar", "lucy", "my mother", "my father", "my sister", "my brother",
         "the doctor", "the teacher", "your friend"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
WHEN = ["today", "tomorrow", "tonight", "this morning", "this afternoon", "this evening",
        "next week", "on $DAY", "on $DAY morning", "on $DAY evening", "next $DAY",
        "this weekend"]
NUMBERS_SMALL = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                 "eleven", "twelve"]
NUMBERS_MORE = NUMBERS_SMALL + ["fifteen", "twenty", "thirty", "forty", "fifty", "a hundred",
                                "a few", "several", "many", "some"]
HOURS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve"]
MINUTES = ["o'clock", "fifteen", "thirty", "forty five", "ten", "twenty", "fifty"]
TRANSPORT = ["train", "bus", "flight", "plane", "boat", "ferry", "taxi"]
WEATHER = ["rain", "snow", "be sunny", "be cold", "be warm", "be windy", "be cloudy",
           "be hot", "freeze"]
DEVICES = ["lights", "heater", "fan", "television", "radio", "oven", "music", "alarm",
           "air conditioner", "computer", "coffee machine", "dishwasher"]
FOODS = ["pizza", "soup", "salad", "chicken", "fish", "rice", "pasta", "bread", "cheese",
         "coffee", "tea", "milk", "juice", "water", "chocolate", "ice cream"]
FEELINGS = ["happy", "tired", "hungry", "busy", "late", "sick", "ready", "sorry", "early",
            "worried", "angry", "cold"]

RULES = f"""
SENTENCE -> 4: $COMMAND | 3: $QUESTION | 3: $STATEMENT
COMMAND -> 3: [please] $MOVE_VERB the $NP $WHERE_TO | 2: [please] $HAND_VERB me the $NP
         | [please] pick up the $NP [in the $ROOM] | [please] turn $ONOFF the $DEVICE [in the $ROOM]
         | set an alarm for $TIME $WHEN | remind me to call $NAME $WHEN
         | [please] call $NAME [at home | at work] | send a message to $NAME [$WHEN]
         | book a table for $NUM_SMALL at the restaurant $WHEN
         | buy $NUM_SMALL tickets to $CITY for $WHEN | [please] open the $OPENABLE
         | [please] close the $OPENABLE | [please] clean the $ROOM $WHEN
         | put the $NPS [back] in the $CONTAINER | order some $FOOD for $WHEN
         | show me the way to the $PLACE | find the nearest $PLACE
         | wake me up at $TIME | [please] play some music in the $ROOM
         | do not forget to bring the $NP | let me know when the $TRANSPORT to $CITY leaves
QUESTION -> 2: what time is the next $TRANSPORT to $CITY
          | when does the $TRANSPORT from $CITY arrive
          | how far is $CITY from $CITY | what is the weather like in $CITY $WHEN
          | is it going to $WEATHER in $CITY $WHEN | 2: where is the $NP
          | where are the $NPS | 2: how many $NPS are there in the $ROOM
          | who left the $NP on the $SPOT | do you know where $NAME put the $NP
          | can you tell me when the $PLACE opens | is the $PLACE open $WHEN
          | which $OBJ is [the] $BIGGER | what did $NAME buy at the $PLACE
          | are there any $NPS in the $ROOM | how long does it take to get to $CITY
          | could you $MOVE_VERB the $NP $WHERE_TO | is $NAME $FEELING
          | would you like some $FOOD | where can i buy a $OBJ | what color is the $OBJ
          | how much is a ticket to $CITY | why is the $NP on the $SPOT
STATEMENT -> 2: the $NP is $WHERE_AT | 2: there are $NUM_MORE $NPS $WHERE_AT
           | $NAME is going to $CITY $WHEN | the $TRANSPORT to $CITY leaves at $TIME
           | it is very $TEMP in $CITY $WHEN | $NAME left the $NP in the $ROOM
           | my $OBJ is $ADJ | the $OBJ in the $ROOM is $ADJ
           | i need $NUM_SMALL $NPS for the party | we are meeting at the $PLACE at $TIME
           | $NAME bought $NUM_SMALL $NPS at the $PLACE | i am $FEELING $WHEN
           | the $PLACE closes at $TIME | $NAME wants some $FOOD for dinner
           | i think it will $WEATHER $WHEN | the $NPS are $WHERE_AT
           | $NAME called from $CITY this morning | i will be home at $TIME
NP -> 2: $OBJ | 2: $COLOR $OBJ | $SIZE $OBJ | $SIZE $COLOR $OBJ
NPS -> 2: $OBJS | 2: $COLOR $OBJS | $SIZE $OBJS
WHERE_TO -> 2: to the $SIDE | 3: $PREP_TO the $SPOT | into the $ROOM
          | to the $SIDE of the $OBJ | next to the $NP
WHERE_AT -> 3: $PREP_AT the $SPOT | in the $ROOM | next to the $NP | $PREP_AT the $SPOT in the $ROOM
SIDE -> left | right | front | back | top | bottom | middle
PREP_TO -> on | onto | under | behind | near | next to | in front of | on top of | beside
PREP_AT -> on | under | behind | near | next to | in front of | on top of | beside | above | below
MOVE_VERB -> move | put | place | push | pull | carry | slide | drag | bring | throw
HAND_VERB -> give | hand | bring | pass | show | send
ONOFF -> on | off
OPENABLE -> door | window | fridge | drawer | garage door | box | jar | bottle | curtains
CONTAINER -> box | basket | drawer | bag | closet | bucket | cupboard
TIME -> 3: $HOUR $MINUTE | $HOUR $MINUTE in the $DAYPART | noon | midnight
      | half past $HOUR | quarter past $HOUR | quarter to $HOUR
DAYPART -> morning | afternoon | evening
BIGGER -> bigger | smaller | heavier | older | newer | cheaper | better | cleaner
TEMP -> cold | warm | hot | windy | cloudy | dry | wet | sunny
ADJ -> $COLOR | $SIZE | missing | expensive | cheap | beautiful | new | old
OBJ -> {" | ".join(s for s, _ in OBJECTS)}
OBJS -> {" | ".join(p for _, p in OBJECTS)}
COLOR -> {" | ".join(COLORS)}
SIZE -> {" | ".join(SIZES)}
ROOM -> {" | ".join(ROOMS)}
PLACE -> {" | ".join(PLACES)}
SPOT -> {" | ".join(SPOTS)}
CITY -> {" | ".join(CITIES)}
NAME -> {" | ".join(NAMES)}
DAY -> {" | ".join(DAYS)}
WHEN -> {" | ".join(WHEN)}
NUM_SMALL -> {" | ".join(NUMBERS_SMALL)}
NUM_MORE -> {" | ".join(NUMBERS_MORE)}
HOUR -> {" | ".join(HOURS)}
MINUTE -> {" | ".join(MINUTES)}
TRANSPORT -> {" | ".join(TRANSPORT)}
WEATHER -> {" | ".join(WEATHER)}
DEVICE -> {" | ".join(DEVICES)}
FOOD -> {" | ".join(FOODS)}
FEELING -> {" | ".join(FEELINGS)}
"""

_TOKEN = re.compile(r"\$\w+|\[|\]|\||[a-z']+")


class GrammarError(ValueError):
    """A malformed rule (the message names the rule)."""


def _parse_sequence(tokens: list[str], i: int, rule: str, inside: bool):
    """Items up to ']' (inside brackets) or the end; an item is a word, ('ref', NAME) or
    ('opt', [alternatives]). Returns (items, next index)."""
    items: list = []
    while i < len(tokens):
        tok = tokens[i]
        if tok == "]":
            if not inside:
                raise GrammarError(f"rule {rule}: unbalanced ']'")
            return items, i
        if tok == "|":
            return items, i
        if tok == "[":
            alts, i = _parse_alternatives(tokens, i + 1, rule, inside=True)
            if i >= len(tokens) or tokens[i] != "]":
                raise GrammarError(f"rule {rule}: '[' without ']'")
            items.append(("opt", alts))
        elif tok.startswith("$"):
            items.append(("ref", tok[1:]))
        else:
            items.append(tok)
        i += 1
    if inside:
        raise GrammarError(f"rule {rule}: '[' without ']'")
    return items, i


def _parse_alternatives(tokens: list[str], i: int, rule: str, inside: bool):
    alts = []
    while True:
        seq, i = _parse_sequence(tokens, i, rule, inside)
        alts.append(seq)
        if i < len(tokens) and tokens[i] == "|":
            i += 1
            continue
        return alts, i


class Grammar:
    """The rule table, parsed; ``sample(rng)`` draws one sentence from ``start``."""

    def __init__(self, rules: str = RULES, start: str = "SENTENCE"):
        self.start = start
        self.rules: dict[str, tuple[list, np.ndarray]] = {}
        for name, body in self._split_rules(rules):
            alts, weights = [], []
            for raw in self._split_top_level(body):
                m = re.match(r"\s*(\d+)\s*:", raw)
                weights.append(float(m.group(1)) if m else 1.0)
                raw = raw[m.end():] if m else raw
                tokens = _TOKEN.findall(raw)
                if "".join(tokens).replace("$", "") != re.sub(r"[\s$]", "", raw):
                    raise GrammarError(f"rule {name}: unexpected characters in {raw.strip()!r}")
                seq, _ = _parse_sequence(tokens, 0, name, inside=False)
                if not seq:
                    raise GrammarError(f"rule {name}: empty alternative")
                alts.append(seq)
            w = np.array(weights)
            self.rules[name] = (alts, w / w.sum())
        for name in self.references():
            if name not in self.rules:
                raise GrammarError(f"reference to undefined rule ${name}")

    @staticmethod
    def _split_rules(text: str):
        name, body = None, []
        for line in text.strip().splitlines():
            if "->" in line:
                if name is not None:
                    yield name, " ".join(body)
                name, rest = line.split("->", 1)
                name, body = name.strip(), [rest]
            elif line.strip():
                body.append(line)
        if name is not None:
            yield name, " ".join(body)

    @staticmethod
    def _split_top_level(body: str) -> list[str]:
        """Split at '|' outside brackets."""
        parts, depth, cur = [], 0, []
        for ch in body:
            depth += ch == "["
            depth -= ch == "]"
            if ch == "|" and depth == 0:
                parts.append("".join(cur))
                cur = []
            else:
                cur.append(ch)
        parts.append("".join(cur))
        return parts

    def _walk(self, seq, words: set, refs: set):
        for item in seq:
            if isinstance(item, str):
                words.add(item)
            elif item[0] == "ref":
                refs.add(item[1])
            else:
                for alt in item[1]:
                    self._walk(alt, words, refs)

    def references(self) -> set[str]:
        """Names of all rules referred to by some alternative."""
        words: set[str] = set()
        refs: set[str] = set()
        for alts, _ in self.rules.values():
            for alt in alts:
                self._walk(alt, words, refs)
        return refs

    def vocabulary(self) -> list[str]:
        """Every word the grammar can produce, sorted."""
        words: set[str] = set()
        refs: set[str] = set()
        for alts, _ in self.rules.values():
            for alt in alts:
                self._walk(alt, words, refs)
        return sorted(words)

    def to_jsgf(self) -> str:
        """The grammar in the JSGF-like notation of ``asrkit graph build --grammar`` (rules as
        ``<name> = /w/ alt | ...``, optional parts as ``[...]``, the start rule public).

        Weights become relative JSGF weights; an optional part keeps no probability of its own."""

        def seq_text(seq) -> str:
            parts = []
            for item in seq:
                if isinstance(item, str):
                    parts.append(item)
                elif item[0] == "ref":
                    parts.append(f"<{item[1].lower()}>")
                else:
                    parts.append("[" + " | ".join(seq_text(a) for a in item[1]) + "]")
            return " ".join(parts)

        lines = ["#JSGF V1.0;", "grammar sentences;"]
        for name, (alts, p) in self.rules.items():
            body = " | ".join(f"/{w:.6g}/ {seq_text(a)}" for a, w in zip(alts, p))
            public = "public " if name == self.start else ""
            lines.append(f"{public}<{name.lower()}> = {body};")
        return "\n".join(lines) + "\n"

    def _expand(self, seq, rng: np.random.Generator, out: list[str], depth: int) -> None:
        if depth > 30:
            raise GrammarError("grammar recursion deeper than 30 levels")
        for item in seq:
            if isinstance(item, str):
                out.append(item)
            elif item[0] == "ref":
                alts, p = self.rules[item[1]]
                self._expand(alts[int(rng.choice(len(alts), p=p))], rng, out, depth + 1)
            elif rng.random() < 0.5:
                alts = item[1]
                self._expand(alts[int(rng.integers(len(alts)))], rng, out, depth + 1)

    def sample(self, rng: np.random.Generator) -> str:
        """One sentence (words separated by single spaces)."""
        out: list[str] = []
        alts, p = self.rules[self.start]
        self._expand(alts[int(rng.choice(len(alts), p=p))], rng, out, 0)
        return " ".join(out)

    def unique_sentences(self, n: int, rng: np.random.Generator, exclude=frozenset(),
                         max_tries: int | None = None) -> list[str]:
        """``n`` distinct sentences not in ``exclude``, in the order drawn. Raises GrammarError
        when ``max_tries`` draws (default 50 n) do not give that many."""
        seen, out = set(exclude), []
        tries = max_tries if max_tries is not None else 50 * n + 100
        for _ in range(tries):
            if len(out) == n:
                break
            s = self.sample(rng)
            if s not in seen:
                seen.add(s)
                out.append(s)
        if len(out) < n:
            raise GrammarError(f"only {len(out)} distinct sentences in {tries} draws (asked {n})")
        return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", action="store_true", help="print the vocabulary instead")
    p.add_argument("--num", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    g = Grammar()
    if args.vocab:
        print("\n".join(g.vocabulary()))
    else:
        rng = np.random.default_rng(args.seed)
        for _ in range(args.num):
            print(g.sample(rng))
    return 0


if __name__ == "__main__":
    sys.exit(main())
