"""The dev bank: the families the conflict set's dev split is written from.

Nothing here appears in `heldout_bank` (tests/test_conflicts_eval.py checks it).
"""

from __future__ import annotations

from brain.server.measure.conflicts.vocabulary import Attribute, Bank, MultiAttribute, Relation

# fmt: off

PEOPLE = (
    "Priya", "Sam", "Alice", "Marco", "Yuki", "Omar", "Lena", "Tomás", "Grace", "Ravi",
    "Nadia", "Felix", "Elena", "Jonas", "Aisha", "Pedro",
)
CITIES = (
    "Lisbon", "Porto", "Berlin", "Madrid", "Vienna", "Prague", "Dublin", "Oslo", "Zurich",
    "Copenhagen", "Warsaw", "Athens", "Valencia", "Munich",
)

PORT = Attribute(
    name="port",
    value_kind="number",
    subjects=(
        "the staging database", "the production database", "the metrics gateway",
        "the auth proxy", "the billing API", "the search cluster", "the message broker",
        "the admin console", "the billing worker", "the staging cache", "the production cache",
        "the auth service",
    ),
    values=(
        "5432", "5433", "5434", "6379", "6380", "8080", "8081", "8443", "9090", "9092",
        "9200", "3000", "4000", "7001", "11211",
    ),
    state=("{S} listens on port {V}", "{S} runs on port {V}", "{S} is served on port {V}"),
    paraphrase=(
        "Port {V} is where {s} listens", "{S} uses port {V}", "Connect to {s} on port {V}",
        "{S}'s port is {V}",
    ),
    correction=(
        "Correction: {s} listens on port {V}, not {O}",
        "{S} moved to port {V}",
        "{S} no longer uses port {O}; it is on {V} now",
        "{S} now listens on port {V}",
    ),
    near=(
        ("the staging database", "the production database"),
        ("the billing API", "the billing worker"),
        ("the staging cache", "the production cache"),
        ("the auth proxy", "the auth service"),
    ),
)

MEETING = Attribute(
    name="meeting",
    value_kind="time",
    subjects=(
        "the weekly design review", "the sprint planning meeting", "the budget review",
        "the architecture sync", "the customer demo", "the security standup",
        "the hiring committee", "the quarterly business review", "the weekly code review",
    ),
    values=(
        "2pm on Friday", "3pm on Friday", "10am on Monday", "11:30 on Tuesday",
        "9:15 on Wednesday", "4pm on Thursday", "1pm on Monday", "10am on Tuesday",
        "3:30pm on Wednesday", "noon on Thursday",
    ),
    state=("{S} is at {V}", "{S} happens at {V}", "We hold {s} at {V}"),
    paraphrase=(
        "At {V} we have {s}", "{S} is scheduled for {V}", "{S} meets every week at {V}",
    ),
    correction=(
        "{S} was moved to {V}",
        "Correction: {s} is at {V}, not {O}",
        "{S} is now at {V}",
        "{S} no longer happens at {O}; it is at {V} instead",
    ),
    near=(
        ("the weekly design review", "the weekly code review"),
        ("the budget review", "the quarterly business review"),
    ),
)

LAUNCH = Attribute(
    name="launch",
    value_kind="date",
    subjects=(
        "the mobile app launch", "the data migration", "the beta release",
        "the pricing change", "the warehouse cut-over", "the partner API go-live",
        "the website redesign launch", "the desktop app launch",
    ),
    values=(
        "March 14", "March 21", "April 2", "April 30", "May 12", "June 1", "June 18",
        "July 7", "September 9", "October 15",
    ),
    state=("{S} is planned for {V}", "{S} is set for {V}", "{S} happens on {V}"),
    paraphrase=(
        "{V} is the date for {s}", "We are targeting {V} for {s}", "{S} lands on {V}",
    ),
    correction=(
        "{S} slipped to {V}",
        "Correction: {s} is on {V}, not {O}",
        "{S} has been pushed to {V}",
        "{S} is now planned for {V}",
    ),
    near=(("the mobile app launch", "the desktop app launch"),),
)

VERSION = Attribute(
    name="version",
    value_kind="version",
    subjects=(
        "the ingestion service|Python", "the checkout frontend|React",
        "the reporting job|Spark", "the mobile backend|Node.js", "the scheduler|Python",
        "the notification service|Go", "the ledger|Postgres", "the event bus|Kafka",
    ),
    values=(),
    qualified=(
        ("Python", ("3.10", "3.11", "3.12", "3.13")),
        ("React", ("17.0", "18.2", "18.3", "19.0")),
        ("Spark", ("3.3.2", "3.4.1", "3.5.0")),
        ("Node.js", ("18", "20", "22")),
        ("Go", ("1.21", "1.22", "1.23")),
        ("Postgres", ("14", "15", "16", "17")),
        ("Kafka", ("3.6", "3.7", "3.8")),
    ),
    state=("{S} runs {L} {V}", "{S} is on {L} {V}", "{S} is pinned to {L} {V}"),
    paraphrase=(
        "{L} {V} is what {s} runs", "The {L} version of {s} is {V}", "{S} depends on {L} {V}",
    ),
    correction=(
        "{S} was upgraded to {L} {V}",
        "{S} now runs {L} {V}",
        "Correction: {s} runs {L} {V}, not {O}",
        "{S} moved from {L} {O} to {V}",
    ),
)

BUDGET = Attribute(
    name="budget",
    value_kind="amount",
    subjects=(
        "the Q3 marketing budget", "the cloud spend cap", "the travel allowance per trip",
        "the conference sponsorship", "the contractor budget", "the hardware refresh budget",
        "the Q4 marketing budget", "the training budget",
    ),
    values=(
        "$12,000", "$15,000", "€8,500", "€10,000", "£4,200", "$2,500", "$40,000", "€1,800",
        "$75,000", "£9,000",
    ),
    state=("{S} is {V}", "{S} was set at {V}", "{S} comes to {V}"),
    paraphrase=("We have {V} for {s}", "{S} amounts to {V}", "{V} is approved for {s}"),
    correction=(
        "{S} was cut to {V}",
        "{S} is now {V}",
        "Correction: {s} is {V}, not {O}",
        "{S} was raised to {V}",
    ),
    near=(("the Q3 marketing budget", "the Q4 marketing budget"),),
)

LEAD = Attribute(
    name="lead",
    value_kind="name",
    subjects=(
        "the payments team", "the onboarding squad", "the data platform group",
        "the security guild", "the mobile team", "the search team", "the payments risk team",
        "the growth squad",
    ),
    values=PEOPLE,
    state=("{V} leads {s}", "{S} is led by {V}", "{V} is the lead of {s}"),
    paraphrase=("The lead of {s} is {V}", "{V} heads {s}", "{V} runs {s}"),
    correction=(
        "{V} is now the lead of {s}",
        "{V} took over {s} from {O}",
        "{O} no longer leads {s}; {V} does",
        "Correction: {s} is led by {V}, not {O}",
    ),
    near=(("the payments team", "the payments risk team"),),
)

OFFSITE = Attribute(
    name="offsite",
    value_kind="place",
    subjects=(
        "the engineering offsite", "the annual kickoff", "the customer summit",
        "the hackathon", "the board meeting", "the design sprint", "the sales offsite",
    ),
    values=CITIES,
    state=("{S} will be held in {V}", "{S} is in {V} this year", "{S} takes place in {V}"),
    paraphrase=(
        "We are going to {V} for {s}", "{V} is the venue city for {s}", "{S} is hosted in {V}",
    ),
    correction=(
        "{S} moved to {V}",
        "{S} is now in {V}",
        "Correction: {s} is in {V}, not {O}",
        "{S} is no longer in {O}; it will be in {V}",
    ),
    near=(("the engineering offsite", "the sales offsite"),),
)

SPEAKS = MultiAttribute(
    name="speaks",
    subjects=PEOPLE,
    values=(
        "French", "German", "Spanish", "Japanese", "Portuguese", "Italian", "Mandarin",
        "Arabic", "Hindi", "Dutch",
    ),
    state=("{S} speaks {V}", "{S} is fluent in {V}"),
    addition=(
        "{S} also speaks {V}", "{S} speaks {V} as well", "{S} is also fluent in {V}",
        "{S} now also speaks {V}",
    ),
    paraphrase=("{V} is one of the languages {S} speaks", "{S} can hold a conversation in {V}"),
)

USES = MultiAttribute(
    name="uses",
    subjects=(
        "the platform team", "the analytics team", "the growth team", "the SRE team",
        "the billing squad", "the infra team",
    ),
    values=("Postgres", "Redis", "Kafka", "Terraform", "Grafana", "Airflow", "dbt", "Sentry"),
    state=("{S} uses {V}", "{S} relies on {V}"),
    addition=(
        "{S} also uses {V}", "{S} uses {V} too", "{S} added {V} to its stack",
        "{S} now also runs {V}",
    ),
    paraphrase=("{V} is part of the stack of {s}", "{S} builds on {V}"),
)

SUPPORTS = MultiAttribute(
    name="supports",
    subjects=("the desktop client", "the sync agent", "the command-line tool", "the installer"),
    values=("Windows", "macOS", "Ubuntu", "Fedora", "FreeBSD", "ChromeOS"),
    state=("{S} supports {V}", "{S} runs on {V}"),
    addition=("{S} also supports {V}", "{S} now supports {V} too", "{S} added {V} support"),
    paraphrase=("{V} is a supported platform for {s}", "{S} works on {V}"),
)

LIVES_IN = Relation(
    name="lives_in",
    predicate="lives_in",
    single_valued=True,
    subject_type="person",
    object_type="place",
    subjects=PEOPLE,
    objects=CITIES,
    texts=(
        "{S} lives in {V}",
        "{S} rents a flat near the old town of {V}",
        "Weekends for {S} mean cycling along the river in {V}, close to home",
        "{S}'s home address is in {V}",
    ),
    past=("{S} lived in {V} until {Y}",),
    since=("{S} has been living in {V} since {Y}",),
)

REPORTS_TO = Relation(
    name="reports_to",
    predicate="reports_to",
    single_valued=True,
    subject_type="person",
    object_type="person",
    subjects=PEOPLE[:8],
    objects=PEOPLE[8:],
    texts=(
        "{S} reports to {V}",
        "{V} is the line manager of {S}",
        "One-on-ones: {S} meets {V} every other week as their manager",
        "{S} sits in {V}'s org",
    ),
    past=("{S} reported to {V} until {Y}",),
    since=("{S} has reported to {V} since {Y}",),
)

WORKS_WITH = Relation(
    name="works_with",
    predicate="works_with",
    single_valued=False,
    subject_type="person",
    object_type="person",
    subjects=PEOPLE[:8],
    objects=PEOPLE[8:],
    texts=(
        "{S} works closely with {V}",
        "{S} pairs with {V} on most tickets",
        "{S} and {V} collaborate on the roadmap",
    ),
)

BANK = Bank(
    name="dev",
    attributes=(PORT, MEETING, LAUNCH, VERSION, BUDGET, LEAD, OFFSITE),
    multi=(SPEAKS, USES, SUPPORTS),
    slots=(LIVES_IN, REPORTS_TO),
    many=(WORKS_WITH,),
)
# fmt: on
