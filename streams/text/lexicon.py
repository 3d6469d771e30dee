"""Word lists for the relation judge (``streams.llm.rules.conflict``) and the subject check
(``streams.core.subjects``), English and Chinese.

Kept apart from the logic so the rules read as rules. The lists are small on
purpose: they name the attributes a personal memory typically holds one value
for (where someone lives, works, what they drive) and the words that signal a
negation or a change of state; everything else is decided by token overlap.
"""

from __future__ import annotations

from memstream.streams.text.words import words_of

# --------------------------------------------------------------------------- English

EN_FUNCTION = frozenset(words_of("""
    a an the and or but nor of to in on at for with by from as into onto about over under per
    than then that this these those is are was were be been being am has have had having do does
    did will would shall should can could may might must it its he she they them their his her
    him hers we our us you your i me my who whom which what when where why how there here so such
    very also too just only even still any some each every all both either neither other another
    more most much many few several own same up down out off s user users assistant go goes going
    went gone get gets got getting make makes made take takes took very really currently usually
    always often sometimes recently lately soon while during before after until since whose
    owns owned own around against via s' am pm
"""))

EN_NEGATIONS = frozenset(words_of("not no never none nobody nothing neither nor cannot without"))
EN_NEGATIVE_VERBS = frozenset(words_of("dislike dislikes disliked hate hates hated detest detests"))
EN_NEGATION_PHRASES = ("no longer", "gave up", "give up", "gives up", "stopped", "stops", "quit")

# Change-of-state cues: a newer statement that says something changed.
EN_CHANGE_WORDS = frozenset(words_of("""
    now anymore moved move moves relocated relocate switched switch switches changed change
    changes quit quits stopped sold replaced rescheduled postponed delayed shifted increased
    decreased rose raised dropped lowered reduced became become becomes upgraded instead left
    promoted demoted transferred
"""))
EN_PHRASE_SYNONYMS = (("would like to", "want to"), ("would love to", "want to"))
EN_CHANGE_PHRASES = ("went up", "went down", "gone up", "gone down", "no longer", "gave up",
                     "these days", "from now on", "any more")

# Rewordings mapped to one form (both sides are stemmed by the rules module).
EN_SYNONYMS: dict[str, str] = {
    "film": "movie", "flick": "movie", "favourite": "favorite", "bicycle": "cycle",
    "bike": "cycle", "purchase": "buy", "bought": "buy", "vehicle": "car", "automobile": "car",
    "enjoy": "like", "love": "like", "adore": "like", "fond": "like", "dislike": "like",
    "hate": "like", "detest": "like", "intend": "plan", "want": "plan", "wish": "plan",
    "hope": "plan", "visit": "travel", "trip": "travel", "tour": "travel", "journey": "travel",
    "rather": "prefer", "call": "name", "allergic": "allergy", "kid": "child",
    "children": "child", "mum": "mother", "mom": "mother", "dad": "father", "colour": "color",
    "neighbour": "neighbor", "employ": "work", "employer": "work", "job": "work",
    "company": "work", "hire": "work", "reside": "live",
    "relocate": "move",
}

EN_NUMBER_WORDS: dict[str, int] = {
    "zero": 0, "one": 1, "a": 1, "an": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "dozen": 12,
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "hundred": 100, "once": 1,
    "twice": 2, "thrice": 3,
}
EN_MONTHS: dict[str, int] = {
    name: i + 1 for i, name in enumerate(words_of(
        "january february march april may june july august september october november december"))
}
EN_WEEKDAYS: dict[str, str] = {
    name: name[:3] for name in words_of("monday tuesday wednesday thursday friday saturday sunday")
}

# Relations that make someone else the subject ("the user's sister …").
EN_RELATIONS: dict[str, str] = {
    w: w for w in words_of("""
        sister brother mother father parents wife husband partner girlfriend boyfriend fiance
        fiancee daughter son child friend colleague coworker boss manager mentor teacher student
        roommate neighbor grandmother grandfather grandma grandpa aunt uncle cousin niece nephew
        dog cat doctor dentist therapist landlord assistant team
    """)
}
EN_RELATIONS.update({"mom": "mother", "mum": "mother", "dad": "father", "kid": "child",
                     "kids": "child", "children": "child", "co-worker": "coworker",
                     "neighbour": "neighbor", "spouse": "wife"})

# Sentence-initial capitalised words that are not names.
EN_NOT_NAMES = frozenset(words_of("""
    the a an in on at for by with from to every each last next this that since during after before
    when while if as i user users
"""))

# --------------------------------------------------------------------------- Chinese

ZH_NEGATIONS = ("不再", "再也不", "从不", "从没", "从来没", "没有", "不", "没", "别", "未曾",
                "讨厌", "戒了", "停止", "放弃")
# Words that contain 不/没 without negating anything.
ZH_NOT_NEGATIONS = ("不错", "不过", "不同", "不少", "不久", "不仅", "不断", "不但", "差不多",
                    "没关系", "不得不")
ZH_CHANGE = tuple(words_of("""
    搬到 搬去 搬回 搬家 换成 换了 换到 改为 改成 改到 改了 现在 如今 目前 已经不 不再 辞职 离职
    跳槽 涨到 涨了 降到 降了 调到 推迟 提前到 变成 戒了 卖了 升职 升为 降职 转学 转到 转行 决定不
"""))
# Rewordings mapped to one form before tokenising (regex, replacement), applied in order.
ZH_SYNONYMS: tuple[tuple[str, str], ...] = (
    ("早晨|清晨", "早上"), ("打算|准备|想要", "计划"), ("想(?=[学去买要做换])", "计划"),
    ("旅游", "旅行"), ("电影|影片", "片"), ("名字叫|名字是|名叫", "叫"),
    ("出生于|出生在", "生日"), ("热爱|偏爱", "喜欢"), ("(?<![可恋])爱(?![好人情])", "喜欢"),
    ("学(?![习校生会期])", "学习"), ("太太|老婆", "妻子"), ("老公", "丈夫"), ("母亲", "妈妈"),
    ("父亲", "爸爸"), ("汽车|车子", "车"), ("分析师", "分析"), ("自行车", "单车"),
    ("家在", "住在"),
)
ZH_STOP_CHARS = frozenset(
    "的了是在和与也都就很要会把被对给着过吗呢吧啊呀还又再才这那有个每该其从去到"
)
# Time adverbs that say nothing about the fact itself (English: recently, currently, usually).
ZH_FILLERS = ("正在", "最近", "目前", "一直", "经常", "通常", "平时", "总是", "已经", "常常")
ZH_RELATIONS: dict[str, str] = {
    "女儿": "daughter", "儿子": "son", "妹妹": "sister", "姐姐": "sister", "哥哥": "brother",
    "弟弟": "brother", "妈妈": "mother", "爸爸": "father", "丈夫": "husband", "妻子": "wife",
    "男朋友": "boyfriend", "女朋友": "girlfriend", "朋友": "friend", "同事": "colleague",
    "老板": "boss", "上司": "boss", "经理": "manager", "孩子": "child", "父母": "parents",
    "室友": "roommate", "邻居": "neighbor", "导师": "mentor", "老师": "teacher",
    "爷爷": "grandfather", "奶奶": "grandmother", "外公": "grandfather", "外婆": "grandmother",
    "狗": "dog", "猫": "cat",
}
ZH_MEASURE = "只个位岁元块次天小时公里米本辆台杯口件套间家张双条门节趟遍周年月号"
ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
             "八": 8, "九": 9}
ZH_WEEKDAYS = {"一": "mon", "二": "tue", "三": "wed", "四": "thu", "五": "fri", "六": "sat",
               "日": "sun", "天": "sun", "末": "weekend"}
# Words after which a Chinese place / organisation name follows.
ZH_PLACE_MARKERS = tuple(words_of("""
    住在 家在 搬到了 搬到 搬去了 搬去 搬回了 搬回 定居在 定居 来自 换成了 换成 换到了 换到
    跳槽到了 跳槽到 入职了 入职 调到了 调到 去了 去 到了 从 在
"""))
# A place name ends where one of these begins.
ZH_PLACE_ENDS = (*words_of("""
    工作 上班 上学 辞职 跳槽 读书 学习 开会 生活 定居 旅行 出差 徒步 滑雪
    当 做 是 和 跟 与 的 了 开 买 住 见 看 吃 玩 过
"""), "，", "。")
# Words that contain a place marker character but introduce no place.
ZH_MARKER_NOISE = ("现在", "正在", "还在", "一直在", "在于", "实在", "存在", "自在", "所在")

# --------------------------------------------------------------------------- attribute frames

# Attributes a person holds one value of at a time: a different value for the same
# subject is a contradiction. (frame, English stems, Chinese words)
SLOT_FRAMES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("residence", ("live", "move", "based", "apartment", "unpack", "landlord", "lease",
                   "roommate", "neighborhood", "neighbourhood"),
     ("住在", "搬到", "搬去", "搬回", "搬家", "定居", "住址", "住", "房租", "租房", "租了", "房东",
      "一室一厅", "两室一厅")),
    ("work", ("work",), ("工作", "上班", "辞职", "跳槽", "入职", "任职", "就职", "离职")),
    ("vehicle", ("car", "drive"), ("开车", "一辆", "车", "驾驶")),
    ("phone", ("phone", "iphone", "android", "smartphone"), ("手机", "iphone", "安卓", "android")),
    ("school", ("school", "attend", "university", "college", "enrol"),
     ("上学", "学校", "小学", "中学", "大学", "转学", "就读")),
)
# What a statement is about, beyond the one-value attributes above, for the rules'
# supersession (``streams.llm.rules.supersession``): the things a person has one of at a time
# and says they changed (a job, a diet, a habit, a phone, a gym). Only a said change reads
# these, so two statements that merely mention coffee are no contradiction for them.
# (attribute, English stems, Chinese words)
CHANGE_HINTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("work", ("job", "boss", "manager", "coworker", "colleague", "employer", "company", "office",
              "hire", "resign", "notice", "onboard", "intern", "salary", "career", "startup",
              "promoted", "promotion", "analyst", "auditor", "accountant", "engineer",
              "developer", "programmer", "designer", "nurse", "lawyer", "attorney", "paralegal",
              "consultant", "barista", "cashier", "chef", "scientist", "researcher", "pharmacist",
              "technician", "electrician", "mechanic", "architect", "recruiter", "journalist",
              "librarian", "bartender", "receptionist", "freelancer", "contractor"),
     ("公司", "老板", "同事", "领导", "上司", "新工作", "实习", "工资", "单位", "入职", "离职",
      "上班", "加班", "新东家", "升职", "跳槽", "辞职", "裁员", "岗位", "职位", "程序员", "工程师",
      "设计师", "护士", "律师", "会计", "销售", "经理", "主管")),
    ("phone", ("phone", "iphone", "pixel", "galaxy", "oneplus", "android", "samsung", "huawei",
               "xiaomi", "motorola", "smartphone"),
     ("手机", "苹果手机", "安卓机", "新手机", "华为", "小米", "荣耀", "三星", "OPPO", "vivo",
      "iPhone", "Mate")),
    ("vehicle", ("car", "truck", "suv", "sedan", "motorcycle", "minivan", "hatchback", "tesla",
                 "toyota", "honda", "subaru", "prius", "civic", "corolla", "volkswagen", "jeep"),
     ("电动车", "摩托", "汽车", "开车", "这辆", "那辆", "开的是", "油耗", "油车", "电车",
      "新能源车", "大众", "丰田", "本田", "比亚迪", "特斯拉", "宝马", "奔驰", "奥迪", "蔚来",
      "小鹏")),
    ("diet", ("meat", "vegan", "vegetarian", "plant", "pescatarian", "keto", "chicken", "beef",
              "pork", "steak", "dairy", "carnivore"),
     ("吃肉", "吃素", "素食", "荤", "牛肉", "鸡肉", "猪肉", "无肉不欢", "肉食", "红烧肉", "烤肉")),
    ("residence", ("flat", "rent", "hometown", "apartment", "condo", "lease", "landlord"),
     ("公寓", "小区", "老家", "房租", "租房", "房东")),
    ("drink", ("coffee", "tea", "beer", "wine", "alcohol", "sober", "latte", "espresso",
               "drinking", "booze", "soda", "cola", "coke", "matcha", "juice", "kombucha"),
     ("咖啡", "美式", "拿铁", "奶茶", "喝茶", "喝酒", "啤酒", "红酒", "白酒", "滴酒", "戒酒",
      "酗酒", "酒精", "可乐", "饮料", "汽水", "气泡水", "果汁", "抹茶")),
    ("smoking", ("smoke", "smoking", "cigarette", "vape", "nicotine"), ("烟", "抽烟", "吸烟")),
    ("fitness", ("gym", "membership", "workout", "crossfit", "yoga", "pilates", "fitness",
                 "bouldering"),
     ("健身", "健身房", "瑜伽", "私教", "健身卡")),
    ("pet", ("dog", "cat", "puppy", "kitten", "kitty", "pup", "hamster", "rabbit", "bunny",
             "parrot", "goldfish", "greyhound", "pet"),
     ("狗", "猫", "宠物", "仓鼠", "兔子", "鹦鹉", "金鱼", "乌龟", "柯基", "泰迪", "金毛", "柴犬")),
    ("team", ("support", "supporter", "club", "fan"), ("球队", "球迷", "主队")),
    ("medication", ("mg", "medication", "meds", "pill", "prescription", "prescribed",
                    "dose", "dosage", "antidepressant", "inhaler", "insulin"),
     ("吃药", "处方", "药物", "剂量", "毫克")),
    ("bank", ("bank", "account", "checking", "savings"),
     ("银行卡", "信用卡", "存款", "开户")),
    ("insurance", ("insurance", "insurer", "premium", "deductible"), ("医保", "保险", "车险")),
    ("doctor", ("doctor", "dr", "physician", "gp", "dentist", "therapist"),
     ("医生", "大夫", "牙医")),
    ("commute", ("commute", "subway", "bus", "train", "metro", "bike", "cycling",
                 "carpool", "tram", "ferry"),
     ("地铁", "公交", "通勤", "骑车", "打车")),
    ("partner", ("boyfriend", "girlfriend", "husband", "wife", "partner", "married", "single",
                 "dating", "fiance", "fiancee", "engaged"),
     ("男朋友", "女朋友", "男友", "女友", "老公", "老婆", "对象", "结婚", "单身", "分手", "婚后",
      "前任")),
    ("hair", ("hair", "haircut", "blonde", "brunette", "bangs"),
     ("头发", "短发", "长发", "染发", "发色", "刘海", "发型")),
    ("school", ("school", "university", "college", "semester", "professor", "major", "degree",
                "phd", "grad", "student", "campus", "graduated", "enrolled"),
     ("学校", "大学", "读研", "读博", "研究生", "导师", "学期", "本科", "专业")),
    ("language", ("spanish", "french", "german", "japanese", "korean", "italian", "mandarin",
                  "duolingo"),
     ("日语", "韩语", "法语", "德语", "西班牙语", "意大利语", "英语")),
    ("instrument", ("guitar", "piano", "violin", "drums", "ukulele", "cello", "saxophone"),
     ("吉他", "钢琴", "小提琴", "架子鼓", "尤克里里", "古筝", "大提琴")),
)
# Dates that belong to the thing itself, not to one occurrence of it: a different one conflicts
# even without a word of change (whereas "visited Rome in 2019" / "in 2023" are two visits).
FIXED_DATE_WORDS = ("birthday", "born", "anniversary", "生日", "出生", "纪念日")
# Attributes whose value is one of a few words (polarity-aware for diet).
MARITAL_VALUES: dict[str, str] = {
    "single": "single", "married": "married", "marry": "married", "wedding": "married",
    "divorced": "divorced", "engaged": "engaged", "widowed": "widowed",
    "单身": "single", "已婚": "married", "结婚": "married", "离婚": "divorced",
    "订婚": "engaged", "丧偶": "widowed",
}
DIET_VEG = ("vegetarian", "vegan", "素食", "吃素")
DIET_MEAT = r"\bmeat\b|(?<![猪牛羊鸡鸭鱼烤])肉"  # a regex: pork (猪肉) is not "meat" in general
