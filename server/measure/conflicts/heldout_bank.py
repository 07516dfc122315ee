"""The held-out bank: the same kinds of statements as `dev_bank`, none of its words.

Other attributes (a timeout instead of a port, a deadline instead of a launch date), other
subjects, names and places, and other correction wording ("update:", "actually", "instead
of", "rescheduled to"), so a detector tuned on the dev split is checked on text it never saw.
"""

from __future__ import annotations

from brain.server.measure.conflicts.vocabulary import Attribute, Bank, MultiAttribute, Relation

# fmt: off

PEOPLE = (
    "Ingrid", "Kwame", "Mei", "Diego", "Hannah", "Arjun", "Sofia", "Bilal", "Chloe", "Mateo",
    "Zara", "Henrik", "Noor", "Luca", "Freya", "Tariq",
)
CITIES = (
    "Montreal", "Nairobi", "Seoul", "Lima", "Auckland", "Krakow", "Osaka", "Cape Town",
    "Bogotá", "Tallinn", "Hanoi", "Calgary", "Accra", "Perth",
)

TIMEOUT = Attribute(
    name="timeout",
    value_kind="number",
    subjects=(
        "the payment client", "the webhook sender", "the upload endpoint", "the health probe",
        "the SSO login", "the export job", "the payment gateway", "the webhook receiver",
    ),
    values=(
        "30 seconds", "45 seconds", "60 seconds", "90 seconds", "2 minutes", "5 minutes",
        "10 seconds", "15 seconds", "20 seconds", "3 minutes",
    ),
    state=("{S} times out after {V}", "{S} gives up after {V}", "The timeout of {s} is {V}"),
    paraphrase=("After {V}, {s} stops waiting", "{S} waits at most {V}", "{S} has a {V} limit"),
    correction=(
        "Update: {s} now times out after {V}",
        "The timeout of {s} was raised from {O} to {V}",
        "Actually, {s} times out after {V} rather than {O}",
        "We switched {s} to a timeout of {V}",
    ),
    near=(
        ("the payment client", "the payment gateway"),
        ("the webhook sender", "the webhook receiver"),
    ),
)

DEADLINE = Attribute(
    name="deadline",
    value_kind="date",
    subjects=(
        "the GDPR audit report", "the vendor security questionnaire", "the Q4 roadmap draft",
        "the annual tax filing", "the SOC 2 evidence package", "the grant application",
        "the Q1 roadmap draft", "the vendor contract renewal",
    ),
    values=(
        "2027-01-15", "2027-02-01", "2027-02-28", "2027-03-31", "2027-04-14", "2027-05-20",
        "2027-06-30", "2027-08-01", "2027-09-15", "2027-11-30",
    ),
    state=("{S} is due on {V}", "{S} must be submitted by {V}", "The deadline for {s} is {V}"),
    paraphrase=("We owe {s} by {V}", "{V} is when {s} is due", "{S} has to be in by {V}"),
    correction=(
        "Update: {s} is due on {V} now",
        "{S} has been rescheduled to {V}",
        "The deadline for {s} was extended to {V}",
        "Actually, {s} is due {V}, not {O}",
    ),
    near=(
        ("the Q4 roadmap draft", "the Q1 roadmap draft"),
        ("the vendor security questionnaire", "the vendor contract renewal"),
    ),
)

ON_CALL = Attribute(
    name="on_call",
    value_kind="name",
    subjects=(
        "the storage cluster", "the VPN gateway", "the CI runners", "the email relay",
        "the data warehouse", "the DNS servers", "the storage gateway",
    ),
    values=PEOPLE,
    state=(
        "{V} is on call for {s} this week",
        "This week the on-call engineer for {s} is {V}",
        "{V} carries the pager for {s} this week",
    ),
    paraphrase=(
        "Page {V} about {s} this week",
        "{S} is covered by {V} this week",
        "{V} handles incidents on {s} this week",
    ),
    correction=(
        "Update: {V} is covering {s} instead of {O} this week",
        "{V} swapped in for {O} on the {s} rota",
        "Actually, {V}, not {O}, is on call for {s}",
    ),
    near=(("the storage cluster", "the storage gateway"),),
)

ROOM = Attribute(
    name="room",
    value_kind="place",
    subjects=(
        "the frontend stand-up", "the ops retro", "the product council",
        "the intern onboarding session", "the incident review", "the backend stand-up",
    ),
    values=(
        "Room 4B", "Room 2A", "Room 7C", "the Atlas room", "the Orion room",
        "the library corner", "the rooftop lounge", "Room 12",
    ),
    state=("{S} is held in {V}", "{S} meets in {V}", "We run {s} in {V}"),
    paraphrase=("Go to {V} for {s}", "{V} is where {s} happens", "{S} gathers in {V}"),
    correction=(
        "Heads up: {s} has switched to {V}",
        "{S} relocated from {O} to {V}",
        "Update: {s} meets in {V} from now on",
        "Actually, {s} is in {V} and not {O}",
    ),
    near=(("the frontend stand-up", "the backend stand-up"),),
)

PRICE = Attribute(
    name="price",
    value_kind="amount",
    subjects=(
        "the Pro plan", "the Team plan", "the enterprise add-on", "the storage upgrade",
        "the premium support tier", "the Starter plan",
    ),
    values=(
        "$49 a month", "$59 a month", "$99 a month", "$129 a month", "$19 a month",
        "$249 a month", "$9 a month", "$15 a month",
    ),
    state=("{S} costs {V}", "{S} is priced at {V}", "The price of {s} is {V}"),
    paraphrase=("Customers pay {V} for {s}", "{V} buys {s}", "{S} sells for {V}"),
    correction=(
        "Update: {s} now costs {V}",
        "{S} went up from {O} to {V}",
        "Actually, {s} is {V}, not {O}",
        "We repriced {s} at {V}",
    ),
    near=(("the Pro plan", "the Team plan", "the Starter plan"),),
)

REGION = Attribute(
    name="region",
    value_kind="place",
    subjects=(
        "the analytics pipeline", "the primary Kafka cluster", "the image CDN origin",
        "the audit log store", "the recommendation service", "the secondary Kafka cluster",
    ),
    values=(
        "eu-west-1", "eu-central-1", "us-east-2", "us-west-2", "ap-southeast-1",
        "ap-northeast-1", "ca-central-1", "sa-east-1",
    ),
    state=("{S} is deployed in {V}", "{S} runs in {V}", "{S} sits in the {V} region"),
    paraphrase=("{V} hosts {s}", "You will find {s} in {V}", "{S} is hosted out of {V}"),
    correction=(
        "{S} was migrated to {V}",
        "Update: {s} is in {V} now",
        "{S} left {O} for {V}",
        "Actually, {s} runs in {V} instead of {O}",
    ),
    near=(("the primary Kafka cluster", "the secondary Kafka cluster"),),
)

MIN_OS = Attribute(
    name="min_os",
    value_kind="version",
    subjects=(
        "the iOS app|iOS", "the Android app|Android", "the desktop agent|Windows",
        "the kiosk build|Android", "the Mac helper|macOS", "the tablet app|iPadOS",
    ),
    values=(),
    qualified=(
        ("iOS", ("15", "16", "16.4", "17", "17.2")),
        ("Android", ("11", "12", "13", "14")),
        ("Windows", ("10", "11")),
        ("macOS", ("12", "13", "14")),
        ("iPadOS", ("15", "16", "17")),
    ),
    state=(
        "{S} requires {L} {V} or later",
        "The minimum {L} version for {s} is {V}",
        "{S} supports {L} {V} and newer",
    ),
    paraphrase=(
        "Anything older than {L} {V} cannot run {s}",
        "{S} will not install below {L} {V}",
    ),
    correction=(
        "Update: {s} now requires {L} {V}",
        "{S} raised its minimum from {L} {O} to {V}",
        "Actually, {s} needs {L} {V}, not {O}",
    ),
)

PLAYS = MultiAttribute(
    name="plays",
    subjects=PEOPLE,
    values=("piano", "cello", "guitar", "drums", "violin", "saxophone", "ukulele", "flute"),
    state=("{S} plays the {V}", "{S} is a keen {V} player"),
    addition=(
        "{S} plays the {V} too", "{S} picked up the {V} as well",
        "Besides that, {S} now plays the {V}",
    ),
    paraphrase=("The {V} is an instrument {S} plays", "{S} knows how to play the {V}"),
)

SHIPS_TO = MultiAttribute(
    name="ships_to",
    subjects=("our web shop", "the spare-parts store", "the book subscription", "the coffee club"),
    values=("Canada", "Mexico", "Japan", "Brazil", "Kenya", "Norway", "Chile", "Vietnam"),
    state=("{S} ships to {V}", "{S} delivers to {V}"),
    addition=(
        "{S} also ships to {V}", "{S} started shipping to {V} as well",
        "{S} now ships to {V} too",
    ),
    paraphrase=("{V} is a destination {s} ships to", "Customers in {V} can order from {s}"),
)

INTEGRATES = MultiAttribute(
    name="integrates",
    subjects=("the CRM connector", "the help desk", "our chat bot", "the billing portal"),
    values=("Slack", "Jira", "Salesforce", "Zendesk", "GitHub", "Teams", "HubSpot"),
    state=("{S} integrates with {V}", "{S} has a {V} integration"),
    addition=(
        "{S} also integrates with {V}", "{S} gained a {V} integration too",
        "{S} now connects to {V} as well",
    ),
    paraphrase=("{V} can be connected to {s}", "{S} talks to {V}"),
)

HEADQUARTERS = Relation(
    name="headquartered_in",
    predicate="headquartered_in",
    single_valued=True,
    subject_type="company",
    object_type="place",
    subjects=(
        "Acme Robotics", "Northwind Freight", "Bluefin Labs", "Helios Energy", "Quanta Foods",
        "Vireo Health",
    ),
    objects=CITIES,
    texts=(
        "{S} is headquartered in {V}",
        "The head office of {S} sits in {V}",
        "Visitors to {S} fly into {V}, where the main office is",
        "{S} runs its HQ out of {V}",
    ),
    past=("{S} had its headquarters in {V} until {Y}",),
    since=("{S} has been headquartered in {V} since {Y}",),
)

OWNED_BY = Relation(
    name="owned_by",
    predicate="owned_by",
    single_valued=True,
    subject_type="service",
    object_type="team",
    subjects=(
        "the ledger service", "the image resizer", "the fraud scorer", "the feature-flag API",
        "the invoice mailer",
    ),
    objects=(
        "the core team", "the reliability crew", "the commerce group", "the identity squad",
        "the edge team",
    ),
    texts=(
        "{S} is owned by {V}",
        "Tickets about {s} go to {V}",
        "{V} answer for {s} in the service catalogue",
    ),
    past=("{S} was owned by {V} until {Y}",),
    since=("{S} has belonged to {V} since {Y}",),
)

MEMBER_OF = Relation(
    name="member_of",
    predicate="member_of",
    single_valued=False,
    subject_type="person",
    object_type="group",
    subjects=PEOPLE,
    objects=(
        "the architecture board", "the hiring panel", "the safety committee",
        "the open-source council", "the pricing working group",
    ),
    texts=("{S} sits on {V}", "{S} is a member of {V}", "{S} joined {V}"),
)

BANK = Bank(
    name="heldout",
    attributes=(TIMEOUT, DEADLINE, ON_CALL, ROOM, PRICE, REGION, MIN_OS),
    multi=(PLAYS, SHIPS_TO, INTEGRATES),
    slots=(HEADQUARTERS, OWNED_BY),
    many=(MEMBER_OF,),
)
# fmt: on
