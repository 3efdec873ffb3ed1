"""Regenerate assets/behavior_tasks.json from bddl 3.x (the BEHAVIOR-1K activity definitions).

bddl 3.x cannot share a Python with LIBERO (which pins bddl 1.0.1), so run this in its own venv::

    python3 -m venv /tmp/bddl_venv && /tmp/bddl_venv/bin/pip install bddl==3.6.0 pyyaml
    /tmp/bddl_venv/bin/python scripts/gen_behavior_tasks.py           # write the table
    /tmp/bddl_venv/bin/python scripts/gen_behavior_tasks.py --check   # exit 1 if it is stale

One row per activity (all 1,016 that bddl ships): ``name``, ``instruction`` (hand-written for the
50 challenge tasks in assets/behavior_instructions.yaml, otherwise ``goal_text``), ``goal_text``
(English generated from the goal conditions of problem0.bddl), ``challenge_id`` (0..49 for the
2025 BEHAVIOR challenge, else null), ``max_episode_steps`` and ``rooms`` (the rooms the initial
conditions place objects in). vla_gym reads only the JSON; bddl is never needed at run time.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
TABLE = ROOT / "assets" / "behavior_tasks.json"
INSTRUCTIONS = ROOT / "assets" / "behavior_instructions.yaml"

#: The 50 tasks of the 2025 BEHAVIOR challenge in task-id order (BEHAVIOR-1K,
#: OmniGibson/omnigibson/learning/utils/eval_utils.py, TASK_NAMES_TO_INDICES), each with the mean
#: duration in seconds of its human demonstrations as published with the challenge's demo gallery
#: (BEHAVIOR-1K docs/challenge/task_data.json, "duration", shown as "<m> minutes <s> seconds avg").
CHALLENGE_TASKS = (
    ("turning_on_radio", 72), ("picking_up_trash", 176), ("putting_away_Halloween_decorations", 460),
    ("cleaning_up_plates_and_food", 457), ("can_meat", 395), ("setting_mousetraps", 339),
    ("hiding_Easter_eggs", 254), ("picking_up_toys", 630), ("rearranging_kitchen_furniture", 298),
    ("putting_up_Christmas_decorations_inside", 457), ("set_up_a_coffee_station_in_your_kitchen", 209),
    ("putting_dishes_away_after_cleaning", 365), ("preparing_lunch_box", 275), ("loading_the_car", 641),
    ("carrying_in_groceries", 476), ("bringing_in_wood", 451), ("moving_boxes_to_storage", 487),
    ("bringing_water", 315), ("tidying_bedroom", 368), ("outfit_a_basic_toolbox", 355),
    ("sorting_vegetables", 397), ("collecting_childrens_toys", 640), ("putting_shoes_on_rack", 258),
    ("boxing_books_up_for_storage", 808), ("storing_food", 662), ("clearing_food_from_table_into_fridge", 436),
    ("assembling_gift_baskets", 869), ("sorting_household_items", 527), ("getting_organized_for_work", 522),
    ("clean_up_your_desk", 714), ("setting_the_fire", 304), ("clean_boxing_gloves", 275),
    ("wash_a_baseball_cap", 278), ("wash_dog_toys", 374), ("hanging_pictures", 80),
    ("attach_a_camera_to_a_tripod", 130), ("clean_a_patio", 402), ("clean_a_trumpet", 177),
    ("spraying_for_bugs", 216), ("spraying_fruit_trees", 278), ("make_microwave_popcorn", 108),
    ("cook_cabbage", 471), ("chop_an_onion", 213), ("slicing_vegetables", 495), ("chopping_wood", 358),
    ("cook_hot_dogs", 305), ("cook_bacon", 256), ("freeze_pies", 415), ("canning_food", 766),
    ("make_pizza", 640),
)
#: Episode limits. The 2025 challenge evaluator times out after 2x the mean human demonstration
#: length in steps (eval.py: max_steps = int(2 * human_stats["length"])); at 30 Hz that is
#: 2 * 30 * mean seconds. Activities without demonstrations get the evaluator's default
#: termination_config max_steps (generate_basic_environment_config: 5000).
TIMEOUT_DEMO_MULTIPLE = 2
CONTROL_HZ = 30
DEFAULT_MAX_STEPS = 5000

# ------------------------------------------------------------------------ goal conditions -> English
#: predicate -> (imperative, imperative when negated); {0} and {1} are the predicate's arguments
PHRASES = {
    "inside": ("put {0} inside {1}", "take {0} out of {1}"),
    "ontop": ("put {0} on top of {1}", "take {0} off {1}"),
    "nextto": ("put {0} next to {1}", "move {0} away from {1}"),
    "under": ("put {0} under {1}", "move {0} out from under {1}"),
    "touching": ("make {0} touch {1}", "keep {0} from touching {1}"),
    "overlaid": ("lay {0} over {1}", "take {0} off {1}"),
    "draped": ("drape {0} over {1}", "take {0} off {1}"),
    "attached": ("attach {0} to {1}", "detach {0} from {1}"),
    "covered": ("cover {0} with {1}", "clean {1} off {0}"),
    "filled": ("fill {0} with {1}", "empty {1} out of {0}"),
    "contains": ("get {1} into {0}", "get {1} out of {0}"),
    "saturated": ("soak {0} with {1}", "dry {1} out of {0}"),
    "open": ("open {0}", "close {0}"),
    "toggled_on": ("turn on {0}", "turn off {0}"),
    "cooked": ("cook {0}", "keep {0} uncooked"),
    "frozen": ("freeze {0}", "thaw {0}"),
    "hot": ("heat {0}", "let {0} cool down"),
    "on_fire": ("set {0} on fire", "put out the fire on {0}"),
    "folded": ("fold {0}", "unfold {0}"),
    "unfolded": ("unfold {0}", "fold {0}"),
    "broken": ("break {0}", "keep {0} intact"),
    "real": ("make {0}", "use up {0}"),
}
CONNECTIVES = {"and", "or", "imply", "forall", "exists", "forn", "forpairs", "fornpairs"}
INSTANCE = re.compile(r"^(?P<synset>.+\.n\.\d+)_(?P<number>\d+|\*)$")


def noun(synset: str) -> str:
    """'can__of__soda.n.01' -> 'can of soda'."""
    if synset.startswith("agent.n."):
        return "robot"
    return synset.split(".")[0].replace("__", " ").replace("_", " ")


def plural(phrase: str) -> str:
    """Naive English plural of the head noun ('can of soda' -> 'cans of soda')."""
    words = phrase.split(" ")
    head = words.index("of") - 1 if "of" in words else len(words) - 1
    word = words[head]
    if re.search(r"(s|sh|ch|x|z)$", word):
        word += "es"
    elif re.search(r"[^aeiou]y$", word):
        word = word[:-1] + "ies"
    else:
        word += "s"
    words[head] = word
    return " ".join(words)


class Variable:
    """A quantified variable: its first mention introduces it, later mentions refer back."""

    def __init__(self, first: str, later: str):
        self.first, self.later, self.used = first, later, False

    def mention(self) -> str:
        text = self.later if self.used else self.first
        self.used = True
        return text


class GoalWriter:
    """Turns bddl's parsed goal conditions into one imperative English sentence."""

    def __init__(self, parsed_objects: dict):
        self.counts = {synset: len(instances) for synset, instances in parsed_objects.items()}

    def sentence(self, conditions: list) -> str:
        text = join([self.clause(condition, {}, nested=False) for condition in conditions])
        text = re.sub(r"\s+", " ", text).strip()
        return text[:1].upper() + text[1:] + "."

    def term(self, token: str, scope: dict) -> str:
        if token in scope:
            return scope[token].mention()
        match = INSTANCE.match(token.lstrip("?"))
        if match is None:  # a bare synset or an unusual token
            return "the " + noun(token.lstrip("?"))
        synset = match["synset"]
        if self.counts.get(synset, 1) <= 1 or match["number"] == "*":
            return "the " + noun(synset)
        return f"{noun(synset)} {match['number']}"

    def clause(self, expr: list, scope: dict, nested: bool, negated: bool = False) -> str:
        head = expr[0]
        if head == "not":
            return self.clause(expr[1], scope, nested, negated=not negated)
        if negated and head in CONNECTIVES:
            return "do not " + self.clause(expr, scope, nested)
        if head == "and":
            return join([self.clause(child, scope, nested) for child in expr[1:]])
        if head == "or":
            return "either " + " or ".join(self.clause(child, scope, nested) for child in expr[1:])
        if head == "imply":
            return f"whenever you {self.clause(expr[1], scope, nested)}, also {self.clause(expr[2], scope, nested)}"
        if head in ("forall", "exists"):
            name, kind = expr[1][0], noun(expr[1][2])
            if head == "forall":
                variable = Variable(f"every {kind}", "it")
            else:
                variable = Variable(f"{'a' if nested else 'one'} {kind}", f"that {kind}")
            return self.clause(expr[2], {**scope, name: variable}, nested=True)
        if head == "forn":
            count, (name, _, synset) = int(expr[1][0]), expr[2]
            kind = noun(synset) if count == 1 else plural(noun(synset))
            variable = Variable(f"exactly {count} {kind}", "it" if count == 1 else "them")
            return self.clause(expr[3], {**scope, name: variable}, nested=True)
        if head in ("forpairs", "fornpairs"):
            offset = 1 if head == "fornpairs" else 0
            (first, _, first_kind), (second, _, second_kind) = expr[1 + offset], expr[2 + offset]
            each = f"{'each' if not offset else expr[1][0]} {noun(first_kind)}"
            pairs = {first: Variable(each, "it"), second: Variable(f"a different {noun(second_kind)}", "it")}
            return self.clause(expr[3 + offset], {**scope, **pairs}, nested=True)
        args = [self.term(token, scope) for token in expr[1:]]
        if head in PHRASES:
            return PHRASES[head][negated].format(*args)
        words = head.replace("_", " ")
        return f"make sure {args[0]} is {'not ' if negated else ''}{words}" + "".join(f" {a}" for a in args[1:])


def join(parts: list[str]) -> str:
    parts = [p for p in parts if p]
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def rooms(parsed_initial_conditions: list) -> list[str]:
    return sorted({cond[2] for cond in parsed_initial_conditions if cond[0] == "inroom" and len(cond) == 3})


# ------------------------------------------------------------------------------------ the table
def build_table() -> dict:
    from bddl.activity import Conditions, get_all_activities

    instructions = yaml.safe_load(INSTRUCTIONS.read_text())
    challenge = {name: (index, seconds) for index, (name, seconds) in enumerate(CHALLENGE_TASKS)}
    if list(instructions) != [name for name, _ in CHALLENGE_TASKS]:
        raise SystemExit(f"{INSTRUCTIONS} must list exactly the {len(CHALLENGE_TASKS)} challenge tasks in order")
    rows = []
    for name in sorted(get_all_activities()):
        conditions = Conditions(name, 0, "omnigibson")
        goal_text = GoalWriter(conditions.parsed_objects).sentence(conditions.parsed_goal_conditions)
        index, seconds = challenge.get(name, (None, None))
        rows.append({
            "name": name,
            "instruction": " ".join(instructions[name].split()) if index is not None else goal_text,
            "goal_text": goal_text,
            "challenge_id": index,
            "max_episode_steps": (TIMEOUT_DEMO_MULTIPLE * CONTROL_HZ * seconds if index is not None
                                  else DEFAULT_MAX_STEPS),
            "rooms": rooms(conditions.parsed_initial_conditions),
        })
    missing = set(challenge) - {row["name"] for row in rows}
    if missing:
        raise SystemExit(f"challenge tasks missing from bddl: {sorted(missing)}")
    return {"bddl_version": _bddl_version(), "activities": rows}


def _bddl_version() -> str:
    from importlib.metadata import version

    return version("bddl")


def render(table: dict) -> str:
    """JSON with one activity per line (readable diffs)."""
    rows = ",\n".join("  " + json.dumps(row, ensure_ascii=True) for row in table["activities"])
    return f'{{"bddl_version": {json.dumps(table["bddl_version"])},\n "activities": [\n{rows}\n]}}\n'


def main(argv: list[str]) -> int:
    # plain argparse: this script runs in a bddl 3.x venv without vla_gym (the examples are the docstring's)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="examples:\n  python scripts/"
                                     "gen_behavior_tasks.py\n  python scripts/gen_behavior_tasks.py --check",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed table instead of writing")
    args = parser.parse_args(argv)
    table = build_table()
    text = render(table)
    if args.check:
        if TABLE.read_text() != text:
            print(f"{TABLE} is stale: rerun scripts/gen_behavior_tasks.py")
            return 1
        print(f"{TABLE} matches bddl {_bddl_version()}")
        return 0
    TABLE.write_text(text)
    print(f"wrote {TABLE}: {len(table['activities'])} activities")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
