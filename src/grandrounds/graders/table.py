"""The built-in graders: name -> ``module:class``, read by :data:`grandrounds.core.registry.GRADERS`
the first time a grader is named (nothing here is imported until then). Plugins add theirs through
the ``grandrounds.graders`` entry-point group instead."""

from __future__ import annotations

BUILTINS: dict[str, str] = {
    "mcq": "grandrounds.graders.mcq_grader:MCQGrader",
    "medcalc": "grandrounds.graders.medcalc_grader:MedCalcGrader",
    "medagentbench": "grandrounds.graders.medagentbench_grader:MedAgentBenchGrader",
    "agentclinic": "grandrounds.graders.agentclinic_grader:AgentClinicGrader",
    "medec": "grandrounds.graders.medec_grader:MEDECGrader",
    "medbench": "grandrounds.graders.medbench_grader:MedBenchGrader",
    "healthbench": "grandrounds.graders.healthbench_grader:HealthBenchGrader",
    "healthbench-professional": "grandrounds.graders.healthbench_professional_grader:ProfessionalGrader",
    "medeq": "grandrounds.graders.medeq_grader:MedEQGrader",
    "gaps": "grandrounds.graders.gaps_grader:GAPSGrader",
    "llmeval-med": "grandrounds.graders.llmeval_grader:LLMEvalGrader",
    "rubric": "grandrounds.graders.rubric_grader:RubricGrader",
    "medhallu": "grandrounds.graders.medhallu_grader:MedHalluGrader",
    "med-halt": "grandrounds.graders.med_halt_grader:MedHALTGrader",
    "sct": "grandrounds.graders.sct_grader:SCTGrader",
    "medicationqa": "grandrounds.graders.medicationqa_grader:MedicationQAGrader",
    "careqa-open": "grandrounds.graders.careqa_open_grader:CareQAOpenGrader",
    "meddialog": "grandrounds.graders.meddialog_grader:MedDialogGrader",
    "mediqa-qa": "grandrounds.graders.mediqa_grader:MediqaGrader",
    "vqa": "grandrounds.graders.vqa_grader:VQAGrader",
    "pathvqa": "grandrounds.graders.pathvqa_grader:PathVQAGrader",
}
