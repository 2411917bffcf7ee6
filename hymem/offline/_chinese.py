"""Chinese rules: a human's "我…" statements rewritten about their speaker, and "建议你…" advice turned into facts.

"我是护士" -> "John是护士。"; "我的朋友小王是厨师" -> about 小王;
"你可以试试游泳" from the AI -> "助手建议用户试试游泳。".
"""

from __future__ import annotations

import re

from hymem.offline._conversation import AI, Speaker, finish
from hymem.offline._occupations import is_job_zh

_ZH_LEAD = re.compile(r"^(?:你好|您好|嗨|哈喽|哈啰|hi|hello|hey|嗯+|哦|噢|啊|对|是的|好的|好吧|其实|另外|还有|对了|"
                      r"顺便说一下|顺便说|然后|所以|不过|但是|而且|那个)[\s，,！!。~～]*", re.I)
_ZH_GREETING = re.compile(r"^(?:你好|您好|嗨|哈喽|哈啰|hi|hello|hey)", re.I)
ZH_QUESTION = re.compile(r"[？?]$|[吗呢么][。！!]?$|什么|怎么|为什么|哪里|哪儿|哪个|多少|几点|是不是|有没有|能不能|"
                          r"可不可以|要不要|请问")
_ZH_SKIP_I = re.compile(r"^我(?:觉得|认为|想知道|想问|想请教|不知道|不太清楚|不确定|知道了|明白|懂了|同意|"
                        r"希望|猜|也这么|也是这么|很好|挺好|还好|没事|试试|会试试|去试试|看看|需要|请问|马上|先|再|"
                        r"有个问题|有一个问题|有点|正在找|在找|想找|记得|忘了|刚才|会的|可以|来了|来看|很高兴|很开心|"
                        r"太好|感觉)")
REL_ZH = ("好朋友|男朋友|女朋友|朋友|老婆|妻子|太太|老公|丈夫|姐姐|妹妹|哥哥|弟弟|妈妈|母亲|爸爸|父亲|儿子|"
           "女儿|同事|老板|室友|邻居|表哥|表姐|表弟|表妹|堂哥|堂姐|堂弟|堂妹|爷爷|奶奶|外公|外婆|叔叔|阿姨|"
           "舅舅|领导|同学|上司|经理|闺蜜|发小")
_VERB_ZH = "是|在|住|喜欢|爱|有|会|今年|也|很|刚|已经|正在|要|想|就|不|每|搬|养|开|做|当|学|从|叫|和|跟|去|来|能|还"
_THIRD_ZH = re.compile(rf"^我的?(?P<rel>{REL_ZH})(?P<name>(?!(?:{_VERB_ZH}))(?:[A-Za-z][A-Za-z'-]*|"
                       rf"[\u4e00-\u9fff]{{1,3}}?))\s*(?P<rest>(?:{_VERB_ZH}).+)$")
_MOVE_ZH = re.compile(r"^(?P<t>[^，,]{0,8}?)搬(?:家)?(?:到|去|来)了?(?P<p>[^，,的了啦呢]+)[了啦呢]?")
_ZH_FILLER = re.compile(r"^(?:也|现在|目前|如今)+|^(?:很|非常|特别|真的|超级?)(?=喜欢|爱)")


def _zh_pronouns(text: str, who: Speaker) -> str:
    return re.sub(r"我(?!们)", who.zh, text.replace("我的", who.zh_poss))


def zh_rest(rest: str, who: Speaker, listener: Speaker | None = None) -> str:
    """The predicate after the subject: fillers dropped, a move turned into where they live, "不…了" into "不再…"."""
    rest = re.split(r"[，,](?:但是|但|不过|所以|因为|可是)", _ZH_FILLER.sub("", rest))[0]
    rest = re.sub(r"^(?:已经)?不(?!再)(.+?)了$", r"不再\1", rest)
    if move := _MOVE_ZH.match(rest):
        rest = f"住在{move.group('p')}{rest[move.end():]}"
    if listener is not None:
        rest = re.sub(r"[你您]", listener.zh, rest.replace("你的", listener.zh_poss).replace("您的", listener.zh_poss))
    return _zh_pronouns(rest, who)


def zh_statement(sentence: str, who: Speaker, listener: Speaker | None = None) -> list[tuple[str, str]]:
    """Facts (text, subject) in one Chinese sentence spoken by the human `who`."""
    s = sentence.strip()
    if ZH_QUESTION.search(s):
        return []
    greeted = bool(_ZH_GREETING.match(s))
    while (m := _ZH_LEAD.match(s)) and m.end() > 0:
        s = s[m.end() :]
    s = s.rstrip("。！!；;，, ")
    parts = re.split(r"[，,](?=我(?!们))", s)
    if len(parts) > 1:  # "…，我…" clauses; "，我们" does not split (and must not recurse forever)
        return [fact for part in parts for fact in zh_statement(part, who, listener)]
    if re.match(r"^我(?:和|跟|与)", s) or not re.match(r"^我(?!们)", s) or _ZH_SKIP_I.match(s):
        return []
    if third := _THIRD_ZH.match(s):
        rest = third.group("rest")
        if rest[:1] in ("和", "跟"):
            return []
        name = third.group("name")
        return [(finish(f"{name}是{who.zh_poss}{third.group('rel')}，{zh_rest(rest, who, listener)}", zh=True), name)]
    rest = zh_rest(s[1:], who, listener)
    if len(rest) < 2:
        return []
    if greeted and (m := re.fullmatch(r"是(?:[A-Za-z][\w-]*|[\u4e00-\u9fff]{2,3})", rest)) and not is_job_zh(rest[1:]):
        return [(finish(f"{who.zh}叫{rest[1:]}", zh=True), who.subject)]
    return [(finish(who.zh + rest, zh=True), who.subject)]


_ZH_AI_LEAD = re.compile(r"^(?:好的|当然|嗯|没问题|另外|此外|首先|其次|然后|最后|或者|如果是这样|那么|所以|"
                         r"也许|或许|请)[\s，,！!。:：]*")
_YOU_ZH = r"(?P<you>你们|您们|大家|你|您)"
_ZH_AI = (
    re.compile(rf"^(?:我)?(?:强烈|还是)?(?:建议|推荐){_YOU_ZH}?(?P<x>.+)$"),
    re.compile(rf"^{_YOU_ZH}(?:可以|应该|不妨|最好|需要|得|要)(?P<x>.+)$"),
    re.compile(r"^(?:可以|不妨)(?P<x>(?:试试|尝试).+)$"),
    re.compile(r"^(?P<x>(?:试试|尝试|记得|别忘了|避免|安装|运行|检查|重启|升级|更新|使用).+)$"),
)
_ZH_AI_FIX = re.compile(r"^(?P<np>解决办法|解决方法|解决方案|办法|方案|修复方法)是(?P<x>.+)$")


def zh_suggestion(sentence: str, who: Speaker = AI) -> str | None:
    """ "建议你…" / "你可以…" / "试试…" / "解决办法是…" from the AI -> "助手建议…" (a named human's: "王芳建议…")."""
    s = sentence.strip()
    if ZH_QUESTION.search(s):
        return None
    while (m := _ZH_AI_LEAD.match(s)) and m.end() > 0:
        s = s[m.end() :]
    s = s.rstrip("。！!；;，, ")

    def swap(x: str) -> str:
        return re.sub(r"我(?!们)", who.zh, re.sub(r"[你您]", "用户", re.sub(r"[你您]们", "大家", x)))

    if (m := _ZH_AI_FIX.match(s)) and who is AI:
        return finish(f"助手建议的{m.group('np')}是{swap(m.group('x'))}", zh=True)
    for number, pattern in enumerate(_ZH_AI):
        if (m := pattern.match(s)) and len(m.group("x")) >= 2:
            you = m.groupdict().get("you") or ("" if number == 0 else "你")
            target = "大家" if you.endswith(("们", "家")) else "用户" if you else ""
            return finish(f"{who.zh}建议{target}{swap(m.group('x'))}", zh=True)
    return None
