"""Where an episode runs: one attempt at one task (:mod:`.episode`), the one rollout engine on browser threads or a
Ray cluster (:mod:`.rollouts`), the steps no agent takes alone (:mod:`.critical`), and what drives it: trajectory
collection (:mod:`.collection`), live runs on real websites (:mod:`.live`) with Online-Mind2Web's submission folder
(:mod:`.submission`), and the sandbox's reference solutions played end to end (:mod:`.solve`)."""
