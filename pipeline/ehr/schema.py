"""The MIMIC-IV v2.2 schema (31 tables) plus the derived `cost` table.

One `TableSchema` per table: Polars dtypes in the column order of the release, the primary key,
links to other tables, the time columns and the sort order used on disk. Dtypes follow the
official MIMIC-IV DDL (mimic-code): codes that carry leading zeros (`ndc`, `drg_code`, `gsn`) and
free-text doses (`dose_val_rx` holds ranges like "1200-2500") are strings, not numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

_DTYPES: dict[str, pl.DataType] = {
    "int": pl.Int64(),
    "float": pl.Float64(),
    "str": pl.String(),
    "datetime": pl.Datetime("us"),
    "date": pl.Date(),
}


@dataclass(frozen=True)
class TableSchema:
    """Columns, keys, links and on-disk order of one table."""

    name: str
    module: str  # "hosp", "icu" or "derived"
    columns: dict[str, pl.DataType]
    primary_key: tuple[str, ...]
    sort_by: tuple[str, ...]
    links: dict[str, str] = field(default_factory=dict)  # column -> "table.column"
    required: bool = False
    description: str = ""

    @property
    def time_columns(self) -> tuple[str, ...]:
        return tuple(c for c, t in self.columns.items() if t in (pl.Datetime("us"), pl.Date()))

    @property
    def polars_schema(self) -> pl.Schema:
        return pl.Schema(self.columns)

    @property
    def source_name(self) -> str:
        """Path of the table inside a MIMIC-IV release, without extension."""
        return f"{self.module}/{self.name}"


def _columns(spec: str) -> dict[str, pl.DataType]:
    """Parse "name:type name:type ..." into an ordered column -> dtype mapping."""
    out: dict[str, pl.DataType] = {}
    for token in spec.split():
        name, kind = token.split(":")
        out[name] = _DTYPES[kind]
    return out


_SUBJECT = {"subject_id": "patients.subject_id"}
_HADM = {**_SUBJECT, "hadm_id": "admissions.hadm_id"}
_STAY = {**_HADM, "stay_id": "icustays.stay_id", "caregiver_id": "caregiver.caregiver_id",
         "itemid": "d_items.itemid"}


def _t(name: str, module: str, spec: str, pk: str, sort: str, links: dict[str, str] | None = None,
       required: bool = False, description: str = "") -> TableSchema:
    return TableSchema(name=name, module=module, columns=_columns(spec), primary_key=tuple(pk.split()),
                       sort_by=tuple(sort.split()), links=dict(links or {}), required=required,
                       description=description)


_TABLES: list[TableSchema] = [
    # ---- hosp ----
    _t("admissions", "hosp",
       "subject_id:int hadm_id:int admittime:datetime dischtime:datetime deathtime:datetime "
       "admission_type:str admit_provider_id:str admission_location:str discharge_location:str "
       "insurance:str language:str marital_status:str race:str edregtime:datetime edouttime:datetime "
       "hospital_expire_flag:int",
       "hadm_id", "subject_id admittime", {**_SUBJECT, "admit_provider_id": "provider.provider_id"},
       required=True, description="One row per hospital admission."),
    _t("d_hcpcs", "hosp", "code:str category:int long_description:str short_description:str",
       "code", "code", description="Dictionary of HCPCS billing codes."),
    _t("d_icd_diagnoses", "hosp", "icd_code:str icd_version:int long_title:str",
       "icd_code icd_version", "icd_version icd_code", description="Dictionary of ICD-9/ICD-10 diagnoses."),
    _t("d_icd_procedures", "hosp", "icd_code:str icd_version:int long_title:str",
       "icd_code icd_version", "icd_version icd_code", description="Dictionary of ICD-9/ICD-10 procedures."),
    _t("d_labitems", "hosp", "itemid:int label:str fluid:str category:str",
       "itemid", "itemid", description="Dictionary of laboratory items."),
    _t("diagnoses_icd", "hosp", "subject_id:int hadm_id:int seq_num:int icd_code:str icd_version:int",
       "hadm_id seq_num", "subject_id hadm_id seq_num",
       {**_HADM, "icd_code": "d_icd_diagnoses.icd_code"}, description="Billed diagnoses per admission."),
    _t("drgcodes", "hosp",
       "subject_id:int hadm_id:int drg_type:str drg_code:str description:str drg_severity:int "
       "drg_mortality:int",
       "hadm_id drg_type drg_code", "subject_id hadm_id drg_type", _HADM,
       description="Diagnosis-related groups per admission."),
    _t("emar", "hosp",
       "subject_id:int hadm_id:int emar_id:str emar_seq:int poe_id:str pharmacy_id:int "
       "enter_provider_id:str charttime:datetime medication:str event_txt:str scheduletime:datetime "
       "storetime:datetime",
       "emar_id", "subject_id charttime",
       {**_HADM, "poe_id": "poe.poe_id", "pharmacy_id": "pharmacy.pharmacy_id",
        "enter_provider_id": "provider.provider_id"},
       description="Electronic medication administration record."),
    _t("emar_detail", "hosp",
       "subject_id:int emar_id:str emar_seq:int parent_field_ordinal:float administration_type:str "
       "pharmacy_id:int barcode_type:str reason_for_no_barcode:str complete_dose_not_given:str "
       "dose_due:str dose_due_unit:str dose_given:str dose_given_unit:str "
       "will_remainder_of_dose_be_given:str product_amount_given:float product_unit:str product_code:str "
       "product_description:str product_description_other:str prior_infusion_rate:float "
       "infusion_rate:float infusion_rate_adjustment:str infusion_rate_adjustment_amount:float "
       "infusion_rate_unit:str route:str infusion_complete:str completion_interval:str new_iv_bag_hung:str "
       "continued_infusion_in_other_location:str restart_interval:str side:str site:str "
       "non_formulary_visual_verification:str",
       "emar_id parent_field_ordinal", "subject_id emar_seq parent_field_ordinal",
       {**_SUBJECT, "emar_id": "emar.emar_id", "pharmacy_id": "pharmacy.pharmacy_id"},
       description="Details of each medication administration."),
    _t("hcpcsevents", "hosp",
       "subject_id:int hadm_id:int chartdate:date hcpcs_cd:str seq_num:int short_description:str",
       "hadm_id hcpcs_cd seq_num", "subject_id chartdate seq_num", {**_HADM, "hcpcs_cd": "d_hcpcs.code"},
       description="Billed HCPCS events."),
    _t("labevents", "hosp",
       "labevent_id:int subject_id:int hadm_id:int specimen_id:int itemid:int order_provider_id:str "
       "charttime:datetime storetime:datetime value:str valuenum:float valueuom:str "
       "ref_range_lower:float ref_range_upper:float flag:str priority:str comments:str",
       "labevent_id", "subject_id charttime",
       {**_HADM, "itemid": "d_labitems.itemid", "order_provider_id": "provider.provider_id"},
       description="Laboratory measurements."),
    _t("microbiologyevents", "hosp",
       "microevent_id:int subject_id:int hadm_id:int micro_specimen_id:int order_provider_id:str "
       "chartdate:datetime charttime:datetime spec_itemid:int spec_type_desc:str test_seq:int "
       "storedate:datetime storetime:datetime test_itemid:int test_name:str org_itemid:int org_name:str "
       "isolate_num:int quantity:str ab_itemid:int ab_name:str dilution_text:str dilution_comparison:str "
       "dilution_value:float interpretation:str comments:str",
       "microevent_id", "subject_id chartdate charttime", {**_HADM, "order_provider_id": "provider.provider_id"},
       description="Microbiology cultures and susceptibilities."),
    _t("omr", "hosp", "subject_id:int chartdate:date seq_num:int result_name:str result_value:str",
       "subject_id chartdate seq_num result_name", "subject_id chartdate seq_num", _SUBJECT,
       description="Online medical record: outpatient height, weight, BMI and blood pressure."),
    _t("patients", "hosp",
       "subject_id:int gender:str anchor_age:int anchor_year:int anchor_year_group:str dod:date",
       "subject_id", "subject_id", required=True, description="One row per patient."),
    _t("pharmacy", "hosp",
       "subject_id:int hadm_id:int pharmacy_id:int poe_id:str starttime:datetime stoptime:datetime "
       "medication:str proc_type:str status:str entertime:datetime verifiedtime:datetime route:str "
       "frequency:str disp_sched:str infusion_type:str sliding_scale:str lockout_interval:str "
       "basal_rate:float one_hr_max:str doses_per_24_hrs:float duration:float duration_interval:str "
       "expiration_value:int expiration_unit:str expirationdate:datetime dispensation:str "
       "fill_quantity:str",
       "pharmacy_id", "subject_id starttime", {**_HADM, "poe_id": "poe.poe_id"},
       description="Pharmacy orders."),
    _t("poe", "hosp",
       "poe_id:str poe_seq:int subject_id:int hadm_id:int ordertime:datetime order_type:str "
       "order_subtype:str transaction_type:str discontinue_of_poe_id:str discontinued_by_poe_id:str "
       "order_provider_id:str order_status:str",
       "poe_id", "subject_id ordertime poe_seq", {**_HADM, "order_provider_id": "provider.provider_id"},
       description="Provider order entry."),
    _t("poe_detail", "hosp", "poe_id:str poe_seq:int subject_id:int field_name:str field_value:str",
       "poe_id field_name", "subject_id poe_seq field_name", {**_SUBJECT, "poe_id": "poe.poe_id"},
       description="Details of provider orders."),
    _t("prescriptions", "hosp",
       "subject_id:int hadm_id:int pharmacy_id:int poe_id:str poe_seq:int order_provider_id:str "
       "starttime:datetime stoptime:datetime drug_type:str drug:str formulary_drug_cd:str gsn:str ndc:str "
       "prod_strength:str form_rx:str dose_val_rx:str dose_unit_rx:str form_val_disp:str "
       "form_unit_disp:str doses_per_24_hrs:float route:str",
       "pharmacy_id drug_type drug", "subject_id starttime",
       {**_HADM, "pharmacy_id": "pharmacy.pharmacy_id", "poe_id": "poe.poe_id",
        "order_provider_id": "provider.provider_id"},
       description="Prescribed medications with dose, unit and route."),
    _t("procedures_icd", "hosp",
       "subject_id:int hadm_id:int seq_num:int chartdate:date icd_code:str icd_version:int",
       "hadm_id seq_num", "subject_id chartdate seq_num", {**_HADM, "icd_code": "d_icd_procedures.icd_code"},
       description="Billed procedures per admission."),
    _t("provider", "hosp", "provider_id:str", "provider_id", "provider_id",
       description="Dictionary of de-identified provider ids."),
    _t("services", "hosp",
       "subject_id:int hadm_id:int transfertime:datetime prev_service:str curr_service:str",
       "hadm_id transfertime curr_service", "subject_id transfertime", _HADM,
       description="Clinical services a patient was under."),
    _t("transfers", "hosp",
       "subject_id:int hadm_id:int transfer_id:int eventtype:str careunit:str intime:datetime "
       "outtime:datetime",
       "transfer_id", "subject_id intime", _HADM, description="Ward and unit transfers."),
    # ---- icu ----
    _t("caregiver", "icu", "caregiver_id:int", "caregiver_id", "caregiver_id",
       description="Dictionary of de-identified ICU caregiver ids."),
    _t("chartevents", "icu",
       "subject_id:int hadm_id:int stay_id:int caregiver_id:int charttime:datetime storetime:datetime "
       "itemid:int value:str valuenum:float valueuom:str warning:int",
       "stay_id charttime itemid", "subject_id charttime", _STAY,
       description="ICU charted observations, including vital signs."),
    _t("d_items", "icu",
       "itemid:int label:str abbreviation:str linksto:str category:str unitname:str param_type:str "
       "lownormalvalue:float highnormalvalue:float",
       "itemid", "itemid", description="Dictionary of ICU items."),
    _t("datetimeevents", "icu",
       "subject_id:int hadm_id:int stay_id:int caregiver_id:int charttime:datetime storetime:datetime "
       "itemid:int value:datetime valueuom:str warning:int",
       "stay_id itemid charttime", "subject_id charttime", _STAY, description="ICU date-valued observations."),
    _t("icustays", "icu",
       "subject_id:int hadm_id:int stay_id:int first_careunit:str last_careunit:str intime:datetime "
       "outtime:datetime los:float",
       "stay_id", "subject_id intime", _HADM, description="One row per ICU stay; los in days."),
    _t("ingredientevents", "icu",
       "subject_id:int hadm_id:int stay_id:int caregiver_id:int starttime:datetime endtime:datetime "
       "storetime:datetime itemid:int amount:float amountuom:str rate:float rateuom:str orderid:int "
       "linkorderid:int statusdescription:str originalamount:float originalrate:float",
       "orderid itemid", "subject_id starttime", _STAY, description="Ingredients of ICU inputs."),
    _t("inputevents", "icu",
       "subject_id:int hadm_id:int stay_id:int caregiver_id:int starttime:datetime endtime:datetime "
       "storetime:datetime itemid:int amount:float amountuom:str rate:float rateuom:str orderid:int "
       "linkorderid:int ordercategoryname:str secondaryordercategoryname:str "
       "ordercomponenttypedescription:str ordercategorydescription:str patientweight:float "
       "totalamount:float totalamountuom:str isopenbag:int continueinnextdept:int statusdescription:str "
       "originalamount:float originalrate:float",
       "orderid itemid", "subject_id starttime", _STAY, description="ICU fluid and drug inputs."),
    _t("outputevents", "icu",
       "subject_id:int hadm_id:int stay_id:int caregiver_id:int charttime:datetime storetime:datetime "
       "itemid:int value:float valueuom:str",
       "stay_id charttime itemid", "subject_id charttime", _STAY, description="ICU outputs (urine, drains)."),
    _t("procedureevents", "icu",
       "subject_id:int hadm_id:int stay_id:int caregiver_id:int starttime:datetime endtime:datetime "
       "storetime:datetime itemid:int value:float valueuom:str location:str locationcategory:str "
       "orderid:int linkorderid:int ordercategoryname:str ordercategorydescription:str "
       "patientweight:float isopenbag:int continueinnextdept:int statusdescription:str "
       "originalamount:float originalrate:float",
       "orderid", "subject_id starttime", _STAY, description="ICU procedures (lines, ventilation, imaging)."),
    # ---- derived ----
    _t("cost", "derived",
       "event_type:str event_id:int subject_id:int hadm_id:int chargetime:datetime cost:float",
       "event_type event_id", "subject_id chargetime", _HADM,
       description="SYNTHETIC charges (MIMIC-IV has no costs): a seeded price per code applied to "
                   "diagnoses, procedures, labs and prescriptions. See pipeline/ehr/cost.py."),
]

TABLES: dict[str, TableSchema] = {t.name: t for t in _TABLES}
MIMIC_TABLES: tuple[str, ...] = tuple(t.name for t in _TABLES if t.module != "derived")
REQUIRED_TABLES: tuple[str, ...] = tuple(t.name for t in _TABLES if t.required)
DERIVED_TABLES: tuple[str, ...] = tuple(t.name for t in _TABLES if t.module == "derived")


def table(name: str) -> TableSchema:
    """Look a table up by name, with an error that lists the known ones."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known tables: {', '.join(sorted(TABLES))}") from None
