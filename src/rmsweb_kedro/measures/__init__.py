"""What measures a model: scoring a policy on states (:mod:`.scoring`), failure modes and critical states
(:mod:`.mining`, probed by :mod:`.probing`), offline and online evaluation (:mod:`.evaluation`), the report
(:mod:`.report`), judge agreement (:mod:`.agreement`), and the tables, figures and intervals they are made with
(:mod:`.reporting`)."""
