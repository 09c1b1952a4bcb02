/// What the pipeline's stage loops tell as each stage returns (`ProxyPipeline`): a
/// sampled request's span records it (`SpanRecord.stageEnded`); every other request
/// passes `NoStageEvents`, whose empty method vanishes when the loop is specialized.
protocol StageEvents {
    func stageEnded(_ kind: StageKind, waits: Bool)
}

/// Nothing recorded (an untraced or unsampled request).
struct NoStageEvents: StageEvents {
    @inline(__always) func stageEnded(_ kind: StageKind, waits: Bool) {}
}

extension SpanRecord: StageEvents {}
