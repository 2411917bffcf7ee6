"""The semantic matcher's behaviour a user relies on: paraphrases match, near-misses of each kind and
unrelated facts do not, numbers are compared with their units, abbreviations count as their
expansions. The sentences are written for these tests (none is a labelled pair)."""

import pytest

from evals.scoring.alignment import difference, words_of
from evals.scoring.checks import Qualifiers, mismatches, name_substitution
from evals.scoring.quantities import quantities, same_quantities


@pytest.mark.parametrize(("a", "b"), [
    ("The user is 1.75 metres tall.", "The user is 175 cm tall."),
    ("The user walks for forty-five minutes a day.", "The user walks for 45 min daily."),
    ("The user has coached football for two decades.", "The user has coached football for 20 years."),
    ("The user's cat weighs 4 kilograms.", "The user's cat weighs 4000 grams."),
    ("The user starts work at 9 pm.", "The user starts work at 21:00."),
    ("The user is 41 years old.", "The user is forty-one."),
    ("用户每天读书一个半小时。", "用户每天读书90分钟。"),
    ("用户身高一米八。", "用户身高1.8米。"),
    ("用户养了三只猫。", "用户养了3只猫。"),
    ("用户月薪1.2万元。", "用户的月薪是一万二千元。"),
    ("The user sets the oven to 180 degrees Celsius.", "The user sets the oven to 356°F."),
    ("用户每天午睡一刻钟。", "用户每天午睡15分钟。"),
    ("用户的外孙一岁半。", "用户的外孙18个月大。"),
])
def test_numbers_are_compared_with_their_units(a, b):
    assert same_quantities(quantities(a), quantities(b)), (quantities(a), quantities(b))


@pytest.mark.parametrize(("a", "b"), [
    ("The user is 1.75 metres tall.", "The user is 175 m tall."),
    ("The user runs 5 km a day.", "The user runs 5 miles a day."),
    ("The user starts work at 9 am.", "The user starts work at 9 pm."),
    ("用户住在八楼。", "用户住在十八楼。"),
    ("The user uses Python 3.10.", "The user uses Python 3.11."),
    ("The user keeps the bedroom at 18°C.", "The user keeps the bedroom at 18°F."),
    ("用户的女儿三岁。", "用户的女儿两岁半。"),
])
def test_a_different_quantity_is_different(a, b):
    assert not same_quantities(quantities(a), quantities(b))


def test_a_clock_time_says_its_part_of_the_day_once():
    from evals.scoring.semantic import prepare_text

    assert prepare_text("The user goes to bed at 11 p.m.").periods == prepare_text("The user goes to bed at 23:00.").periods
    assert prepare_text("The user runs at 7 a.m.").periods == prepare_text("The user runs in the morning.").periods


def test_a_thesaurus_knows_opposite_roles_but_not_synonyms():
    from evals.scoring.lexicon import opposite

    assert opposite("sells", "buys") and opposite("lent", "borrowed") and opposite("teaches", "learns")
    assert not opposite("started", "began") and not opposite("quit", "resigned")
    # Chinese words through their CC-CEDICT glosses; 借 is both "lend" and "borrow", so it opposes neither
    assert opposite("教", "学") and opposite("卖", "买") and opposite("赢", "输")
    assert not opposite("借", "借给") and not opposite("医生", "大夫")
    # nouns take the roles of the verbs they derive from, and -er / -ee of one stem are opposite roles
    assert opposite("seller", "buyer") and opposite("卖家", "买家") and opposite("interviewer", "interviewee")
    assert opposite("mentor", "mentee") and not opposite("doctor", "physician") and not opposite("runner", "running")


def test_a_quoted_message_does_not_qualify_the_fact_that_cites_it():
    from evals.scoring.semantic import prepare_text

    gold = prepare_text('When make fails with "cannot find -lz", install zlib1g-dev and build again.')
    pred = prepare_text('When `make -j4` failed with "ld: cannot find -lz: No such file (exit 2)": Fix: install zlib1g-dev.')
    assert gold.qualifiers.polarity == pred.qualifiers.polarity and pred.quantities == ()
    # a text that is one quotation is the claim itself
    assert prepare_text('"The user does not eat pork."').qualifiers.polarity == prepare_text("The user does not eat pork.").qualifiers.polarity


def test_number_forms_read_as_one_quantity():
    pairs = [("18 months old", "a year and a half old"), ("six months old", "half a year old"),
             ("15 years", "a decade and a half"), ("15 half-marathons", "fifteen half-marathons"),
             ("two and a half hours", "150 minutes"), ("cost 18,000 pounds", "cost £18k"),
             ("45 minutes", "three quarters of an hour"), ("ran a 10 km race", "ran a 10K race"),
             ("房租每月两千五", "房租每月2500元"), ("练琴一个钟头", "练琴60分钟"), ("住了三个月", "住了3个月"),
             ("lives on the eleventh floor", "lives on the 11th floor"), ("her twenty-first birthday", "her 21st birthday")]
    for a, b in pairs:
        assert same_quantities(quantities(a), quantities(b)), (a, b)
    assert not same_quantities(quantities("owes 50 pounds"), quantities("owes 60 pounds"))
    assert not same_quantities(quantities("lives on the eighteenth floor"), quantities("lives on the 8th floor"))


def test_a_numeral_inside_a_chinese_name_is_not_a_number():
    assert quantities("用户住在四川。") == () and quantities("用户在一家医院工作。") == ()


@pytest.mark.parametrize(("a", "b"), [
    ("lives in Los Angeles", "lives in LA"),
    ("works in artificial intelligence", "works in AI"),
    ("writes JavaScript", "writes JS"),
    ("deploys on Kubernetes", "deploys on k8s"),
    ("has an MSc in economics", "has a Master of Science in economics"),
    ("is studying for the GMAT", "is studying for the Graduate Management Admission Test"),
    ("is moving to the Democratic Republic of the Congo", "is moving to the DRC"),
    ("visited MoMA", "visited the Museum of Modern Art"),
    ("has obsessive-compulsive disorder", "has OCD"),
])
def test_an_abbreviation_is_its_expansion(a, b):
    diff = difference(words_of(a), words_of(b))
    assert not diff.unmatched_a and not diff.unmatched_b
    assert not name_substitution(f"The user {a}.", f"The user {b}.")


@pytest.mark.parametrize(("a", "b"), [
    ("lives in Berlin", "lives in Paris"),
    ("studies at MIT", "studies at Stanford University"),
    ("has an MSc in economics", "holds a Bachelor of Science in economics"),
])
def test_a_different_name_is_not_an_abbreviation(a, b):
    assert name_substitution(f"The user {a}.", f"The user {b}.")


def test_where_two_predicates_differ():
    swap = difference(words_of("is allergic to cats"), words_of("is allergic to dogs"))
    assert swap.substitution == 1.0 and swap.unmatched_a == ("cats",) and swap.unmatched_b == ("dogs",)
    assert difference(words_of("coaches the junior team"), words_of("is coached by the junior team")).voice == 1.0
    assert difference(words_of("sold a car to Mia"), words_of("bought a car from Mia")).direction == 1.0
    assert difference(words_of("sold a car to a colleague"), words_of("bought a car from a colleague")).direction == 1.0
    assert difference(words_of("把房间转租给了老林"), words_of("从老林那里转租了房间")).direction == 1.0
    # a direction counts for a person, not a thing: "from" after "suffers" or 从 before a shipyard is no role
    assert difference(words_of("suffers from migraines"), words_of("is a migraine sufferer")).direction == 0.0
    assert difference(words_of("辞掉了船厂的工作"), words_of("从船厂离职了")).direction == 0.0
    assert difference(words_of("is a pilot"), words_of("was a pilot")).tense == 1.0
    assert difference(words_of("在北京大学读书"), words_of("在北大读书")).slot_abbrev == 1.0
    assert difference(words_of("去年进了128个球"), words_of("去年进了28个球")).slot_abbrev == 0.0  # another number
    assert difference(words_of("repaired the fence"), words_of("fixed the fence")).voice == 0.0


PARAPHRASES = [
    ("The user works at Siemens.", "User is employed by Siemens"),  # missed by the sixth session's fit (p 0.48)
    ("The user is a vegetarian.", "The user follows a vegetarian diet."),
    ("The user lives in San Diego.", "The user lives in San Diego, California."),
    ("The user has two daughters.", "The user has 2 daughters."),
    ("The user studied at UCLA.", "The user studied at UCLA."),
    ("The user painted the fence.", "The fence was painted by the user."),  # passive: the agent is the subject
    ("The user does not like jazz.", "The user dislikes jazz."),  # an antonym undone by a negation
    ("The user lives in Graz.", "The user mentioned that they live in Graz."),  # a reporting frame
    ("用户在华为工作。", "用户在华为上班。"),  # e5 reads Chinese (MiniLM mapped most characters to [UNK])
    ("用户今年三十五岁。", "用户今年35岁。"),
    # mem0-style memories open with an adverb or a verb no name is followed by: they name no one
    ("The user usually runs at night.", "Usually runs at night"), ("The user prefers dark mode.", "Prefers dark mode"),
    ("The user previously worked as a nurse.", "Previously worked as a nurse"),
]
NEAR_MISSES = [
    ("The user lives in Lisbon.", "The user wants to live in Lisbon."),  # modality
    ("The user lives in Lisbon.", "The user used to live in Lisbon."),
    ("The user swims on Tuesdays.", "The user swims on Thursdays."),  # time
    ("The user is a pharmacist.", "The user's sister is a pharmacist."),  # relation
    ("The user likes opera.", "The user does not like opera."),  # negation
    ("The user has three dogs.", "The user has five dogs."),  # number
    ("The user lives in Lisbon.", "The user lives in Porto."),  # entity
    ("The user lent a drill to Omar.", "The user borrowed a drill from Omar."),  # role: direction
    ("The user interviews candidates.", "The user is interviewed by candidates."),  # role: voice
    ("The user sells vintage guitars.", "The user buys vintage guitars."),  # role: antonyms
    ("The user teaches yoga.", "The user is learning yoga."),  # role: one causes the other
    ("用户欠了表哥五千块钱。", "表哥欠了用户五千块钱。"),  # role: the user is the one acted on
    ("用户每天早上喝咖啡。", "用户每天晚上喝咖啡。"),
    ("用户养了两只猫。", "用户养了四只猫。"),
    ("用户喜欢游泳。", "用户不喜欢游泳。"),
    ("The user never drinks coffee.", "Usually drinks coffee"),
]
UNRELATED = [
    ("The user is a nurse.", "The user runs a small bakery."),
    ("The user lives in Lisbon.", "The user plays the cello."),
    ("用户是一名护士。", "用户养了一只猫。"),
]


@pytest.fixture(scope="module")
def semantic():
    from evals.scoring.choose_matcher import make_matcher

    return make_matcher("semantic")


@pytest.mark.slow
@pytest.mark.parametrize(("gold", "pred"), PARAPHRASES)
def test_a_clear_paraphrase_matches(semantic, gold, pred):
    assert semantic.same_fact(gold, "user", pred, "user")


@pytest.mark.slow
@pytest.mark.parametrize(("gold", "pred"), NEAR_MISSES + UNRELATED)
def test_a_near_miss_or_an_unrelated_fact_does_not_match(semantic, gold, pred):
    assert not semantic.same_fact(gold, "user", pred, "user")


@pytest.mark.parametrize(("a", "b", "in_place"), [
    ("窦建国被公司派到了迪拜。", "公司把窦建国派到了迪拜", True),  # the patient of 把
    ("郑浩修好了用户的电脑。", "用户的电脑是郑浩修好的", True),  # the agent of a 是…的 cleft
    ("Unilever hired Ximena.", "Ximena was hired by Unilever.", True),  # the agent after "by"
    ("公司把窦建国派到了迪拜", "窦建国被公司派到了迪拜。", False),  # no subject split off this side
    ("郑浩修好了用户的电脑。", "用户感谢郑浩修好了电脑", False),  # named, but not where the other voice holds it
    ("郑浩修好了用户的电脑。", "郑浩把用户的电脑修好了", False),  # the same subject split off both sides
])
def test_a_subject_named_inside_the_other_predicate_by_the_other_voice_is_compared_in_place(a, b, in_place):
    from evals.scoring.semantic import named_in_place, prepare_text

    assert named_in_place(prepare_text(a), prepare_text(b)) is in_place


@pytest.mark.slow
@pytest.mark.parametrize(("gold", "subject", "pred", "same"), [
    ("窦建国被公司派到了迪拜。", "窦建国", "公司把窦建国派到了迪拜", True),
    ("郑浩修好了用户的电脑。", "郑浩", "用户的电脑是郑浩修好的", True),
    ("窦建国被公司派到了迪拜。", "窦建国", "公司把窦建国派到了多哈", False),
    pytest.param("郑浩修好了用户的电脑。", "郑浩", "用户的手机是郑浩修好的", False, marks=pytest.mark.xfail(
        reason="known misread: a thing swapped across a reordered cleft (电脑 / 手机) is not told apart by the text "
               "features, as before the zhnames merge", strict=True)),
])
def test_a_name_stripped_from_one_side_and_kept_in_the_other_is_matched_in_place(semantic, gold, subject, pred, same):
    assert semantic.same_fact(gold, subject, pred, subject) is same


ROLE_CHECKS = [
    # a passive that swaps who does what is ruled out, a voice paraphrase is not
    ("The user tutors Mateo in chemistry.", "is tutored in chemistry by Mateo", True),
    ("The user owes Ben 50 dollars.", "The user is owed 50 dollars by Ben.", True),
    ("用户起诉了前公司。", "用户被前公司起诉了。", True),
    ("The user works at Siemens.", "User is employed by Siemens", False),
    ("The user's luggage was lost by the airline.", "The airline lost the user's luggage.", False),
    # Chinese converse verbs through a dictionary
    ("周敏在大学教化学。", "周敏在大学学化学。", True),
    ("用户在闲鱼上卖二手相机。", "用户在闲鱼上买二手相机。", True),
    ("用户讨厌排队。", "用户很反感排队。", False),
    # a person in another role, but not a synonym, a kind, or a verb's inflection
    ("Ottilie is the landlord of a cottage in Kent.", "Ottilie is a tenant of a cottage in Kent.", True),
    ("用户是那家牙科诊所的医生。", "用户是那家牙科诊所的病人。", True),
    ("The user is a physician in Oslo.", "The user is a doctor in Oslo.", False),
    ("用户是一名律师。", "用户是一名执业律师。", False),
    ("The user's neighbour teaches yoga.", "The user's neighbour coaches yoga.", False),
    # two steps in the other order, but not the same order in other words
    ("助手学到，发版前要先备份数据库再执行迁移。", "助手经验：先执行迁移，再备份数据库。", True),
    ("The assistant learned to first clear the cache, then rebuild the image.",
     "Lesson: first rebuild the image, then clear the cache.", True),
    ("助手学到，发版前要先备份数据库再执行迁移。", "助手经验：先备份数据库，然后执行迁移。", False),
    ("The assistant learned to first clear the cache, then rebuild the image.",
     "Lesson: first clear the cache and then rebuild the image.", False),
    # the subject is a kind of person on one side and acts on one on the other (employer and employee)
    ("The user hired a dog walker.", "User works as a dog walker", True),
    ("Hedda employs a gardener.", "Hedda is a gardener.", True),
    ("用户雇了一位厨师。", "用户是一名厨师。", True),
    ("The user works as a dog walker.", "User's job: dog walker", False),
    ("The user was elected chairman of the club.", "The club elected the user as its chairman.", False),
    ("The user is a vegetarian.", "The user follows a vegetarian diet.", False),
    ("The user has two nephews.", "Has 2 nephews", False),
]


@pytest.mark.slow
@pytest.mark.parametrize(("gold", "pred", "ruled_out"), ROLE_CHECKS)
def test_a_role_check_rules_out_swapped_roles_and_only_those(semantic, gold, pred, ruled_out):
    assert bool(semantic.evaluate([gold], [pred])[1][0, 0]) is ruled_out


@pytest.mark.parametrize(("a", "b", "flag"), [
    ("Mireille manages a hotel in Lyon.", "Mireille is the manager of a hotel in Lyon.", False),  # a job, not a relation
    ("用户开了一家理发店。", "用户是一家理发店的老板。", False),
    ("The user's maternal grandmother is Irish.", "The user's mother's mother is Irish.", False),  # kin composed
    ("用户的舅舅是厨师。", "用户妈妈的兄弟是厨师。", False),
    ("用户修好了邻居的自行车。", "邻居的自行车被用户修好了。", False),  # the same neighbour, in another frame
    ("Ana, the user's sister, is a lawyer.", "Ana, the user's cousin, is a lawyer.", True),
    ("The user's daughter is learning to dance.", "The user is learning to dance.", True),
    ("Noriko, a colleague of the user, speaks Thai.", "Noriko, a friend of the user, speaks Thai.", True),
    ("The user's wife lives in Leeds.", "The user's ex-wife lives in Leeds.", True),
    ("大海是用户的男朋友。", "大海是用户的前男友。", True),
])
def test_the_relation_check_reads_who_is_named_by_a_relation(a, b, flag):
    assert mismatches(Qualifiers.of(a), Qualifiers.of(b), a, b)["relation"] == float(flag)


def test_a_relation_stated_before_what_is_said_is_read_as_the_subjects_apposition():
    from evals.scoring.semantic import prepare_text

    assert prepare_text("小雯是用户的表姐，在银行工作。").predicate == prepare_text("用户的表姐小雯在银行工作。").predicate
    assert prepare_text("Jack is the user's friend and works as a chef.").predicate == "works as a chef."
    assert prepare_text("Jack is the user's friend.").predicate == "is the user's friend."  # nothing else said
