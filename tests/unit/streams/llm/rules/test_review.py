"""The rules stand-in of the batched merge review (streams/llm/rules/review.py): it answers
each item as the per-pair judge would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memstream.streams.llm.rules import stand_in
from memstream.streams.prompts.conflict import RELATION_JUDGE, JudgeContext, MemoryStatement
from memstream.streams.prompts.review import REVIEW, Candidate, ReviewContext, ReviewItem

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)


def stmt(text: str, day: int = 0) -> MemoryStatement:
    return MemoryStatement(text=text, updated_at=T0 + timedelta(days=day))


def test_the_review_answers_each_item_as_the_pair_judge_would() -> None:
    items = [("Alice lives in Berlin.", "Alice lives in Lisbon."),
             ("The user likes green tea.", "The user plays the cello on Sundays.")]
    ctx = ReviewContext(items=[ReviewItem(new=stmt(new, 1), candidates=[
        Candidate(statement=stmt(old), similarity=0.9)]) for old, new in items])
    answer = stand_in(REVIEW)(ctx)
    for i, (old, new) in enumerate(items):
        single = stand_in(RELATION_JUDGE)(JudgeContext(existing=stmt(old), new=stmt(new, 1),
                                                       similarity=0.9))
        decision = answer.decision_for(i, 1)
        assert (decision.relation if decision else "independent") == single.relation
    merged = answer.decision_for(0, 1)
    assert merged is not None and merged.fused() is not None
    assert "Lisbon" in merged.fused().memory  # type: ignore[union-attr]
    user = REVIEW.render(ctx)[-1]["content"]
    assert user.count("NEW memory") == 2 and "similarity 0.900" in user


def test_an_explicit_change_answers_supersedes_without_a_merged_statement() -> None:
    ctx = ReviewContext(items=[ReviewItem(new=stmt(new, 40), candidates=[
        Candidate(statement=stmt(old), similarity=0.9)]) for old, new in (
        ("I live in Lyon.", "I moved from Lyon to Berlin."),
        ("我抽烟。", "我已经不抽烟了。"),
        ("I live in Lyon.", "I'm thinking of moving to Berlin."),
        ("I live in Lyon.", "My sister moved from Lyon to Berlin."))])
    answer = stand_in(REVIEW)(ctx)
    for i in (0, 1):
        decision = answer.decision_for(i, 1)
        assert decision is not None and decision.relation == "supersedes", i
        assert decision.fused() is None  # nothing is merged
    assert answer.decision_for(2, 1) is None  # a plan
    assert answer.decision_for(3, 1) is None  # another person


def test_a_change_ends_only_what_it_is_about_not_what_was_said_about_the_same_time() -> None:
    pairs = (("I painted a lake at sunrise last week.", "I moved to Lyon last month."),
             ("我上周画了一幅湖景。", "我上个月搬到了里昂。"),
             ("Just finished unpacking in my new place in Austin.", "I moved to Denver in May."),
             ("I'm based in Lyon.", "I moved from Lyon to Berlin."))
    ctx = ReviewContext(items=[ReviewItem(new=stmt(new, 40), candidates=[
        Candidate(statement=stmt(old), similarity=0.9)]) for old, new in pairs])
    answer = stand_in(REVIEW)(ctx)
    closed = [(d.relation if (d := answer.decision_for(i, 1)) else None) == "supersedes"
              for i in range(len(pairs))]
    # a move ends a home (an apartment, a place one unpacked in, the place left), and sharing
    # "last week / last month" makes no two statements one thing
    assert closed == [False, False, True, True]


def _closes(pairs: tuple[tuple[str, str], ...]) -> list[bool]:
    ctx = ReviewContext(items=[ReviewItem(new=stmt(new, 40), candidates=[
        Candidate(statement=stmt(old), similarity=0.9)]) for old, new in pairs])
    answer = stand_in(REVIEW)(ctx)
    return [(d.relation if (d := answer.decision_for(i, 1)) else None) == "supersedes"
            for i in range(len(pairs))]


def test_a_change_that_names_what_it_changed_ends_only_a_statement_about_that() -> None:
    assert _closes((
        ("I drive a 2015 Subaru Outback.", "Just switched my car insurance from Geico to "
         "Progressive."),
        ("我用的是iPhone 14 Pro，拍照还可以。", "我把手机套餐从移动换到联通了。"),
        ("我在小米上班，最近在做相机项目。", "我换了个部门，现在做智能家居了。"),
        ("I go to the PureGym on Baker Street.", "Cancelled my PureGym membership and joined "
         "the Fitness First instead."),
        ("My mobile plan is with Vodafone.", "Switched my phone contract from Vodafone to "
         "giffgaff."),
        ("I use a Pixel 7, the camera is great.", "Traded my Pixel for an iPhone 15."),
    )) == [False, False, False, True, True, True]


def test_a_job_or_a_diet_said_in_other_words_is_one_attribute_and_a_dad_is_not_the_user() -> None:
    assert _closes((
        ("Need help wording an email to my manager at Wayfair.",
         "I handed in my notice and started at Chewy on monday."),
        ("我在华为上班，天天加班。", "我爸刚换了华为P60，他老问我怎么用。"),  # the dad's phone
        ("I eat a lot of chicken and beef, trying to bulk.",
         "been fully plant based since june, no meat at all anymore."),
    )) == [True, False, True]


def test_changes_said_as_chat_says_them_end_what_they_change() -> None:
    assert _closes((
        ("my 2014 civic makes a clicking noise when i turn left.",
         "ever since selling the civic i've been biking everywhere lol."),
        ("无肉不欢的人求推荐红烧肉的做法，要那种肥而不腻的。", "我已经不吃肉了，吃素快两个月。"),
        ("每天下班都要喝两瓶啤酒才睡得着。", "滴酒不沾快半年了。"),
        ("我女朋友小雨下周生日。", "分手以后一个人过周末有点不习惯。"),
        ("我那辆朗逸开了六年了，4S店保养一次报价八百多。", "朗逸卖掉了，换了辆比亚迪海豚。"),
        ("长发太难打理了，每天吹头发要半小时。", "剪了短发之后早上能多睡二十分钟。"),
    )) == [True] * 6


def test_a_now_beside_another_time_ends_only_what_its_own_clause_is_about() -> None:
    assert _closes((
        ("i'm married w two kids under 6.", "以前单身的时候周末都在打游戏，现在哪有整块时间哈哈。"),
        ("住在厦门思明区。", "以前在哈尔滨读书的时候零下三十度都扛得住，现在反而怕冷了。"),
        ("我住在上海。", "我以前住在上海，现在住在北京了。"),
        ("我每天早上喝咖啡。", "以前天天喝咖啡，现在喝茶。"),
        ("I drive to work every day, about 40 min each way.",
         "these days I take the Metro Expo line in, way less stressful."),
    )) == [False, False, True, True, True]


def test_moving_the_office_leaves_the_home() -> None:
    assert _closes((
        ("living in Madison WI, love it here.",
         "moved my office to a new coworking space in Milwaukee 3 days a week."),
        ("I live in Madison.", "Moved my whole family to Milwaukee last month."),
    )) == [False, True]


def test_more_words_of_change_and_of_what_they_change() -> None:
    assert _closes((
        ("I'm a nurse at St Mary's, the night shifts are brutal.",
         "Handed in my notice last week, I start at a clinic downtown in may."),
        ("my rabbit chews every cable in the flat.", "our old bunny passed away in march."),
        ("我每天下午都要来一杯奶茶。", "奶茶已经戒了，现在只喝白开水。"),
        ("我开的是丰田卡罗拉，开了八年了。", "卡罗拉卖了，换了辆特斯拉。"),
        ("我用的是vivo X90。", "换了华为Mate 60，用着挺顺手。"),
        ("I support Arsenal, season ticket for five years.",
         "I don't really follow my old club anymore, it's all basketball now."),
        ("I'm a junior developer at a bank.", "Got promoted to senior engineer last week!"),
        ("I bank with Barclays.", "Moved all my accounts over to Monzo last month."),
        ("我一天抽一包烟。", "我戒烟三个月了。"),
        ("我是长头发，快到腰了。", "把头发剪成短发了，洗头方便多了。"),
    )) == [True] * 10


def test_a_move_within_the_home_a_number_or_an_agreeing_stop_ends_nothing() -> None:
    assert _closes((
        ("I live in Leeds.", "we moved desks at work, I'm by the window now."),
        ("我住在杭州滨江。", "我爸妈来住一阵，我搬到次卧去睡了。"),
        ("I don't smoke.", "I quit smoking in college, and never went back."),
        ("我不喝酒。", "大学毕业以后就戒酒了。"),
        ("我用的是小米13。", "我把手机号换成新的了。"),
        ("I see Dr. Wong at the Elm Street clinic.", "今年换了医保，从Cigna换成了Aetna。"),
        ("在建设银行做柜员，天天站着。", "把常用的信用卡换成了招行的。"),
    )) == [False] * 7


def test_changes_in_the_words_english_chat_uses_for_them() -> None:
    assert _closes((
        ("I work at Deloitte as an auditor.", "I joined Stripe last month as a data analyst."),
        ("I'm a student at Ohio State.", "I graduated in May, so weird not having classes."),
        ("I drive to work, about 30 minutes each way.", "I started biking to work in March."),
        ("My hair is dark brown and down to my shoulders.", "I went blonde over the summer."),
        ("I use a Pixel 6 and the battery is dying.", "I got a new phone, it's an iPhone 15."),
        ("My girlfriend Ana loves hiking.", "We split in the spring, I'm single again."),
    )) == [True] * 6


def test_joining_or_buying_something_beside_what_was_said_ends_nothing() -> None:
    assert _closes((
        ("I support Leeds, season ticket and all.", "I joined a running club in the park."),
        ("I have a cat named Mochi.", "I bought a new scratching post for her."),
        ("I drive a 2012 Honda Civic.", "I bought a used Tesla Model 3 for my wife."),
        ("I'm a student at Ohio State.", "My brother graduated from Purdue in May."),
    )) == [False] * 4
