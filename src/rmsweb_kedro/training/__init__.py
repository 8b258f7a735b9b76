"""Training: the one Accelerate loop SFT and Salvage-DS share (:mod:`.loop`), SFT on policy states (:mod:`.sft`),
the Salvage-DS RL stage (:mod:`.salvage_ds`) with its group samplers (:mod:`.sampling`) and running either under
``accelerate launch`` (:mod:`.launch`)."""
