"""Whether a phrase names an occupation, in English or Chinese.

Why: "I'm a nurse" fills the profile's occupation and "I'm Tim" (after a greeting) is a name; reconcile compares
"is a nurse" with "is a teacher" only when both are jobs.
"""

from __future__ import annotations

_JOBS_EN = {
    "nurse", "doctor", "engineer", "developer", "programmer", "teacher", "professor", "student", "chef", "cook",
    "lawyer", "accountant", "designer", "architect", "scientist", "researcher", "writer", "journalist", "artist",
    "musician", "pilot", "driver", "manager", "consultant", "analyst", "dentist", "pharmacist", "therapist",
    "electrician", "plumber", "carpenter", "mechanic", "farmer", "baker", "barista", "waiter", "waitress", "cashier",
    "firefighter", "officer", "soldier", "photographer", "editor", "translator", "librarian", "veterinarian", "vet",
    "surgeon", "physician", "paramedic", "economist", "entrepreneur", "founder", "ceo", "cto", "intern",
    "freelancer", "tutor", "coach", "actor", "actress", "dancer", "singer", "painter", "banker", "trader", "realtor",
    "secretary", "receptionist", "clerk", "janitor", "tailor", "hairdresser", "nanny", "caregiver", "psychologist",
    "lecturer", "administrator", "admin", "technician", "salesperson", "marketer", "recruiter", "producer",
    "director", "executive", "investor", "retiree", "housewife", "homemaker", "dietitian", "nutritionist",
    "midwife", "cop", "guard", "author", "poet", "playwright", "novelist", "screenwriter", "lifeguard", "police",
    "sysadmin", "devops", "postdoc", "phd",
}
_JOB_ENDINGS = ("writer", "maker", "wright", "worker", "keeper", "designer", "engineer", "manager", "developer",
                "teacher", "smith", "ist", "eer", "ician", "grapher", "ologist")
_NOT_JOBS = {"list", "twist", "fist", "wrist", "mist", "gist", "exist", "assist", "insist", "resist", "persist",
             "beer", "deer", "peer", "cheer", "career", "steer", "sheer", "queer", "veneer"}
_JOBS_ZH = ("师", "员", "医生", "学生", "研究生", "博士生", "家", "工", "手", "者", "长", "官", "警察", "士",
            "匠", "会计", "记者", "老板", "经理", "主管", "总监", "模特", "秘书", "军人", "商人", "工人", "农民",
            "司机", "教授", "保姆", "编剧", "导演", "主播", "翻译", "编辑", "保安", "律师")


def is_job_en(phrase: str) -> bool:
    words = phrase.lower().split()
    if not words or len(words) > 4:
        return False
    head = words[-1]
    return head in _JOBS_EN or (head not in _NOT_JOBS and head.endswith(_JOB_ENDINGS))


def is_job_zh(phrase: str) -> bool:
    return 0 < len(phrase) <= 10 and phrase.endswith(_JOBS_ZH)
