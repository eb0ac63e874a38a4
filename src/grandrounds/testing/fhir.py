"""A small FHIR R4 server on 127.0.0.1 with synthetic patients, for MedAgentBench tests.

The patients and their records are made up here, deterministically from each task's MRN (no real
or published patient data): a Patient for every MRN of the task file (task1's names and birth
dates where the task names them), lab Observations (magnesium ``MG``, glucose ``GLU``, potassium
``K``, HbA1c ``A1C``) spread around the tasks' fixed "now" so that every branch of the checks
occurs (no value, an old value, low and normal values), blood-pressure vitals, and one Condition,
MedicationRequest and Procedure each. :func:`synthetic_records` builds them; :class:`FhirServer`
answers the searches the tasks use, as HAPI FHIR does (a ``searchset`` Bundle, JSON):
``Patient?identifier=|name=|family=|given=|birthdate=|gender=``, ``Observation?patient=&code=&category=&date=``,
``Condition|MedicationRequest|Procedure?patient=`` and ``metadata``. Every request is logged
(method and path); anything but GET is refused with 405, so a test can assert nothing was written.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

#: The tasks' "now" (every MedAgentBench context states it).
NOW = datetime(2023, 11, 13, 10, 15, tzinfo=UTC)
LAB_UNITS = {"MG": "mg/dL", "GLU": "mg/dL", "K": "mmol/L", "A1C": "%"}
_GIVEN = (
    "Alma",
    "Bruno",
    "Cora",
    "Dmitri",
    "Edda",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kaia",
    "Lior",
    "Mina",
    "Nils",
)
_FAMILY = (
    "Arkwright",
    "Bellweather",
    "Corrigan",
    "Dunmore",
    "Eastwick",
    "Fairholm",
    "Gantley",
    "Hollis",
    "Ivers",
    "Jessop",
)
_TASK1 = re.compile(r"name (?P<given>\S+) (?P<family>.+?) and DOB of (?P<dob>\d{4}-\d{2}-\d{2})")


@dataclass
class FhirData:
    """The server's resources by type (``Patient``, ``Observation``, ...), each a FHIR JSON object."""

    resources: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, resource: dict[str, Any]) -> None:
        self.resources.setdefault(resource["resourceType"], []).append(resource)

    def labs(self, mrn: str, code: str) -> list[tuple[datetime, float, str]]:
        """(time, value, the effectiveDateTime as written) of the patient's ``code`` labs, oldest first."""
        out = [
            (
                datetime.fromisoformat(o["effectiveDateTime"]),
                o["valueQuantity"]["value"],
                o["effectiveDateTime"],
            )
            for o in self.resources.get("Observation", ())
            if o["subject"]["reference"] == f"Patient/{mrn}"
            and any(c["code"] == code for c in o["code"].get("coding", []))
        ]
        return sorted(out)

    def patient(self, mrn: str) -> dict[str, Any] | None:
        return next((p for p in self.resources.get("Patient", ()) if p["id"] == mrn), None)


def _rng(mrn: str, what: str) -> random.Random:
    return random.Random(
        int.from_bytes(hashlib.sha256(f"{mrn}:{what}".encode()).digest()[:8], "big")
    )


def _when(hours_ago: float) -> str:
    return (NOW - timedelta(hours=hours_ago)).replace(microsecond=0).isoformat()


def synthetic_records(tasks: Iterable[Mapping[str, Any]]) -> FhirData:
    """Deterministic synthetic records for every MRN of ``tasks`` (the rows of ``test_data_v2.json``)."""
    tasks = list(tasks)
    named: dict[str, tuple[str, str, str]] = {}
    absent: set[tuple[str, str, str]] = set()
    for t in tasks:
        m = (
            _TASK1.search(str(t.get("instruction", "")))
            if str(t.get("id", "")).startswith("task1_")
            else None
        )
        if m:
            who = (m["given"], m["family"], m["dob"])
            sol = t.get("sol") or []
            if sol and sol[0] != "Patient not found":
                named[sol[0]] = who
            else:
                absent.add(who)
    mrns = sorted({str(t["eval_MRN"]) for t in tasks if t.get("eval_MRN")} | set(named))
    data = FhirData()
    for mrn in mrns:
        _patient(data, mrn, named.get(mrn), absent)
        _labs(data, mrn)
        _others(data, mrn)
    return data


def _patient(
    data: FhirData, mrn: str, who: tuple[str, str, str] | None, absent: set[tuple[str, str, str]]
) -> None:
    r = _rng(mrn, "patient")
    given, family, dob = who or (
        r.choice(_GIVEN),
        r.choice(_FAMILY),
        f"{r.randint(1930, 2004)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
    )
    if (
        who is None and (given, family, dob) in absent
    ):  # never the person a task says does not exist
        dob = f"{int(dob[:4]) + 1}{dob[4:]}"
    data.add(
        {
            "resourceType": "Patient",
            "id": mrn,
            "meta": {"versionId": "1"},
            "identifier": [
                {
                    "use": "usual",
                    "type": {
                        "coding": [
                            {
                                "system": "http://terminology.hl7.org/CodeSystem/v2-0203",
                                "code": "MR",
                            }
                        ]
                    },
                    "system": "urn:grandrounds:synthetic-mrn",
                    "value": mrn,
                }
            ],
            "active": True,
            "name": [{"use": "official", "family": family, "given": [given]}],
            "gender": r.choice(("female", "male")),
            "birthDate": dob,
        }
    )


def _lab(data: FhirData, mrn: str, code: str, n: int, hours_ago: float, value: float) -> None:
    data.add(
        {
            "resourceType": "Observation",
            "id": f"{mrn}-{code}-{n}",
            "status": "final",
            "category": [
                {
                    "coding": [
                        {
                            "system": "http://terminology.hl7.org/CodeSystem/observation-category",
                            "code": "laboratory",
                            "display": "Laboratory",
                        }
                    ]
                }
            ],
            "code": {
                "coding": [
                    {"system": "urn:grandrounds:synthetic-lab", "code": code, "display": code}
                ],
                "text": code,
            },
            "subject": {"reference": f"Patient/{mrn}"},
            "effectiveDateTime": _when(hours_ago),
            "issued": _when(hours_ago - 0.5),
            "valueQuantity": {
                "value": value,
                "unit": LAB_UNITS[code],
                "system": "http://unitsofmeasure.org",
                "code": LAB_UNITS[code],
            },
        }
    )


def _labs(data: FhirData, mrn: str) -> None:
    """MG, GLU, K and A1C values placed so each task's branches all occur across the MRNs."""
    r = _rng(mrn, "labs")
    mg = r.choice(("none", "old", 0.8, 1.2, 1.7, 1.9, 2.3))
    if mg != "none":
        _lab(data, mrn, "MG", 0, r.uniform(30, 400), round(r.uniform(1.6, 2.4), 1))
        if isinstance(mg, float):  # "old": only the older value
            _lab(data, mrn, "MG", 1, r.uniform(1, 22), mg)
    for i in range(r.randint(0, 4)):  # glucose: 0-4 in the last 24 hours, and two older
        _lab(data, mrn, "GLU", i, r.uniform(0.5, 23.5), float(r.randint(70, 260)))
    for i in range(2):
        _lab(data, mrn, "GLU", 10 + i, r.uniform(26, 900), float(r.randint(70, 260)))
    k = r.choice(("none", 3.1, 3.4, 3.8, 4.4))
    if isinstance(k, float):
        _lab(data, mrn, "K", 0, r.uniform(100, 2000), 4.0)
        _lab(data, mrn, "K", 1, r.uniform(2, 90), k)
    a1c = r.choice(("none", "recent", "old"))
    if a1c != "none":
        _lab(data, mrn, "A1C", 0, 24 * r.uniform(800, 1500), round(r.uniform(5.0, 9.9), 1))
        _lab(
            data,
            mrn,
            "A1C",
            1,
            24 * (r.uniform(20, 300) if a1c == "recent" else r.uniform(380, 700)),
            round(r.uniform(5.0, 9.9), 1),
        )


def _others(data: FhirData, mrn: str) -> None:
    r = _rng(mrn, "others")
    subject = {"reference": f"Patient/{mrn}"}
    data.add(
        {
            "resourceType": "Observation",
            "id": f"{mrn}-BP-0",
            "status": "final",
            "subject": subject,
            "category": [
                {
                    "coding": [
                        {
                            "system": "http://hl7.org/fhir/observation-category",
                            "code": "vital-signs",
                            "display": "Vital Signs",
                        }
                    ]
                }
            ],
            "code": {"text": "BP"},
            "effectiveDateTime": _when(r.uniform(24, 500)),
            "valueString": f"{r.randint(100, 160)}/{r.randint(60, 95)} mmHg",
        }
    )
    data.add(
        {
            "resourceType": "Condition",
            "id": f"{mrn}-cond",
            "subject": subject,
            "recordedDate": _when(24 * r.uniform(30, 900)),
            "category": [{"coding": [{"code": "problem-list-item"}]}],
            "code": {"text": r.choice(("hypertension", "type 2 diabetes", "asthma"))},
        }
    )
    data.add(
        {
            "resourceType": "MedicationRequest",
            "id": f"{mrn}-med",
            "subject": subject,
            "status": "active",
            "intent": "order",
            "authoredOn": _when(24 * r.uniform(5, 300)),
            "medicationCodeableConcept": {
                "text": r.choice(("lisinopril 10 mg", "metformin 500 mg"))
            },
        }
    )
    data.add(
        {
            "resourceType": "Procedure",
            "id": f"{mrn}-proc",
            "subject": subject,
            "status": "completed",
            "performedDateTime": _when(24 * r.uniform(5, 900)),
            "code": {"text": r.choice(("colonoscopy", "knee arthroscopy"))},
        }
    )


# ---- searching -------------------------------------------------------------------------


def _time_of(resource: Mapping[str, Any]) -> datetime | None:
    for key in ("effectiveDateTime", "authoredOn", "performedDateTime", "recordedDate"):
        if key in resource:
            return _parse_time(resource[key])[0]
    return None


def _parse_time(text: str) -> tuple[datetime, datetime]:
    """The instant range a FHIR date or dateTime search value covers (a date: its whole day, UTC)."""
    text = text.strip().replace(" ", "+")  # an unescaped '+' in a query arrives as a space
    if len(text) == 10:
        day = datetime.fromisoformat(text).replace(tzinfo=UTC)
        return day, day + timedelta(days=1) - timedelta(microseconds=1)
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    return t, t


def _date_matches(when: datetime | None, value: str) -> bool:
    prefix = value[:2] if value[:2] in ("ge", "gt", "le", "lt", "eq", "ne") else "eq"
    start, end = _parse_time(value[2:] if value[:2] == prefix else value)
    if when is None:
        return False
    return {
        "ge": when >= start,
        "gt": when > end,
        "le": when <= end,
        "lt": when < start,
        "eq": start <= when <= end,
        "ne": not start <= when <= end,
    }[prefix]


def _codes(resource: Mapping[str, Any], key: str) -> set[str]:
    out: set[str] = set()
    for concept in (
        resource.get(key, []) if isinstance(resource.get(key), list) else [resource.get(key) or {}]
    ):
        for c in concept.get("coding", []):
            out |= {str(c.get("code")), f"{c.get('system')}|{c.get('code')}"}
        if concept.get("text"):
            out.add(str(concept["text"]))
    return out


def _matches(resource: Mapping[str, Any], name: str, value: str) -> bool:
    if name in ("patient", "subject"):
        return resource.get("subject", {}).get("reference") in (value, f"Patient/{value}")
    if name == "code":
        return bool(set(value.split(",")) & _codes(resource, "code"))
    if name == "category":
        return bool(set(value.split(",")) & _codes(resource, "category"))
    if name == "date":
        return _date_matches(_time_of(resource), value)
    if name == "identifier":
        return any(
            value in (i.get("value"), f"{i.get('system')}|{i.get('value')}")
            for i in resource.get("identifier", [])
        )
    if name in ("family", "given", "name"):
        names = resource.get("name", [])
        words = (
            [n.get("family", "") for n in names]
            if name == "family"
            else [g for n in names for g in n.get("given", [])]
        )
        if name == "name":
            words += [n.get("family", "") for n in names]
        return any(w.lower().startswith(value.lower()) for w in words if w)
    if name == "birthdate":
        return _date_matches(
            _parse_time(resource["birthDate"])[0] if resource.get("birthDate") else None, value
        )
    if name in ("gender", "status", "intent"):
        return resource.get(name) == value
    if name == "_id":
        return resource.get("id") == value
    return True  # a parameter the fixture does not model filters nothing (HAPI would refuse some)


def search(data: FhirData, resource_type: str, query: str, base: str) -> dict[str, Any]:
    """The ``searchset`` Bundle of ``resource_type`` resources matching ``query`` (a URL's query string)."""
    params = [
        (k, v)
        for k, v in parse_qsl(query, keep_blank_values=True)
        if not k.startswith("_") or k == "_id"
    ]
    hits = [
        r
        for r in data.resources.get(resource_type, [])
        if all(_matches(r, k, v) for k, v in params)
    ]
    return {
        "resourceType": "Bundle",
        "id": hashlib.sha256(f"{resource_type}?{query}".encode()).hexdigest()[:16],
        "meta": {"lastUpdated": NOW.isoformat()},
        "type": "searchset",
        "total": len(hits),
        "link": [{"relation": "self", "url": f"{base}{resource_type}?{query}"}],
        "entry": [
            {
                "fullUrl": f"{base}{resource_type}/{r['id']}",
                "resource": r,
                "search": {"mode": "match"},
            }
            for r in hits
        ],
    }


class FhirServer:
    """``with FhirServer(data) as fhir: fhir.base_url`` -> ``http://127.0.0.1:PORT/fhir/``; ``fhir.log``: (method, path) of every request."""

    def __init__(self, data: FhirData, port: int = 0) -> None:
        self.data = data
        self.log: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/fhir/"

    def __enter__(self) -> FhirServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def methods(self) -> dict[str, int]:
        """How many requests of each method the server received."""
        with self._lock:
            out: dict[str, int] = {}
            for method, _ in self.log:
                out[method] = out.get(method, 0) + 1
            return out

    def _answer(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.log.append((method, path))
        if method != "GET":
            return 405, _outcome("this fixture is read-only")
        parts = urlsplit(path)
        resource = parts.path.removeprefix("/fhir/").strip("/")
        if resource == "metadata":
            return 200, {
                "resourceType": "CapabilityStatement",
                "status": "active",
                "fhirVersion": "4.0.1",
                "kind": "instance",
            }
        if resource not in self.data.resources:
            return 404, _outcome(f"unknown resource type {resource!r}")
        try:
            return 200, search(self.data, resource, parts.query, self.base_url)
        except ValueError as e:
            return 400, _outcome(f"invalid search parameter: {e}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                status, body = server._answer(self.command, self.path)
                raw = json.dumps(body, indent=2).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/fhir+json;charset=UTF-8")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (quiet: the log is server.log)
                pass

        return Handler


class _Server(ThreadingHTTPServer):
    request_queue_size = (
        1024  # a run opens many connections at once (socketserver's default backlog is 5)
    )


def _outcome(text: str) -> dict[str, Any]:
    return {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": "processing", "diagnostics": text}],
    }
