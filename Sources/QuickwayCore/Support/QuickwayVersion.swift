public enum QuickwayVersion {
    public static let string = "0.1.0"
}
